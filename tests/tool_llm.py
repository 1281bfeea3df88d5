"""A real OpenAI-compatible chat server on loopback that can call tools and stream.

``responder(body) -> Reply`` sees each request's whole JSON body (messages, tools, tool_choice,
stream); every body is kept in ``bodies``. A reply is sent as one JSON answer, or as server-sent
events when the request asked for ``stream`` (content and tool-call arguments cut into small
deltas, as providers send them).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    content: str | None = ""
    tool_calls: tuple[tuple[str, str], ...] = ()  # (name, arguments JSON text)
    status: int = 200
    error: str = "stub failure"
    usage: dict[str, int] | None = field(default=None)


Responder = Callable[[dict[str, Any]], Reply]


def tool_messages(body: dict[str, Any]) -> list[str]:
    """The tool results the request carries back to the model."""
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


class ToolLLM:
    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.bodies: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                reply = outer.responder(body)
                if reply.status != 200:
                    self._send(reply.status, "application/json", _error(reply.error))
                elif body.get("stream"):
                    self._send(200, "text/event-stream", _events(reply))
                else:
                    self._send(200, "application/json", _json(reply))

            def _send(self, status: int, kind: str, data: bytes) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", kind)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _error(message: str) -> bytes:
    payload = {"error": {"message": message, "type": "invalid_request_error"}}
    return json.dumps(payload).encode()


def _calls(reply: Reply) -> list[dict[str, Any]]:
    return [
        {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
        for i, (n, a) in enumerate(reply.tool_calls)
    ]


def _json(reply: Reply) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = _calls(reply)
    reason = "tool_calls" if reply.tool_calls else "stop"
    choice = {"index": 0, "message": message, "finish_reason": reason}
    payload: dict[str, Any] = {"choices": [choice]}
    if reply.usage is not None:
        payload["usage"] = reply.usage
    return json.dumps(payload, ensure_ascii=False).encode()


def _events(reply: Reply) -> bytes:
    chunks: list[dict[str, Any]] = [{"choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    text = reply.content or ""
    for start in range(0, len(text), 3):
        chunks.append({"choices": [{"index": 0, "delta": {"content": text[start : start + 3]}}]})
    for i, (name, arguments) in enumerate(reply.tool_calls):
        head = {"index": i, "id": f"call_{i}", "type": "function"}
        first = {**head, "function": {"name": name, "arguments": ""}}
        chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [first]}}]})
        for start in range(0, len(arguments), 4):
            piece = {"index": i, "function": {"arguments": arguments[start : start + 4]}}
            chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [piece]}}]})
    reason = "tool_calls" if reply.tool_calls else "stop"
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
    if reply.usage is not None:
        chunks.append({"choices": [], "usage": reply.usage})
    lines = [f"data: {json.dumps(c, ensure_ascii=False)}\n\n" for c in chunks]
    return (": keep-alive\n\n" + "".join(lines) + "data: [DONE]\n\n").encode()
