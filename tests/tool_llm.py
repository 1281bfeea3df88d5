"""A real OpenAI-compatible chat server on loopback (``tests.fakes.Loopback``) that can call
tools and stream.

``responder(body) -> Reply`` sees each request's whole JSON body (messages, tools, tool_choice,
stream); every body is kept in ``bodies``. A reply is sent as one JSON answer, or as server-sent
events when the request asked for ``stream`` (content and tool-call arguments cut into small
deltas, as providers send them).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.fakes import Loopback, request_json


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
    """The chat API served on loopback by ``tests.fakes.Loopback``."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.bodies: list[dict[str, Any]] = []
        self._loopback = Loopback(self._respond)

    async def _respond(self, request: httpx.Request) -> httpx.Response:
        body = request_json(request)
        self.bodies.append(body)
        reply = self.responder(body)
        if reply.status != 200:
            return _answer(reply.status, "application/json", _error(reply.error))
        if body.get("stream"):
            return _answer(200, "text/event-stream", _events(reply))
        return _answer(200, "application/json", _json(reply))

    @property
    def base_url(self) -> str:
        return f"{self._loopback.origin}/v1"

    def stop(self) -> None:
        self._loopback.close()


def _answer(status: int, kind: str, data: bytes) -> httpx.Response:
    return httpx.Response(status, headers={"Content-Type": kind}, content=data)


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
