"""A real OpenAI-compatible chat server on loopback whose answers a test scripts."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Answer:
    """What to answer; with ``held`` the answer waits until that event is set (a model that
    is still thinking, for as long as the test wants, instead of a fixed delay to race)."""

    content: str = ""
    status: int = 200
    held: threading.Event | None = None


Responder = Callable[[list[dict[str, str]]], Answer]


class ScriptedLLM:
    """``responder(messages) -> Answer``; every request's messages are kept in ``requests``."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.requests: list[list[dict[str, str]]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(body["messages"])
                answer = outer.responder(body["messages"])
                if answer.held is not None:
                    answer.held.wait(timeout=300)  # a bound against a stuck test only
                if answer.status != 200:
                    payload: dict[str, Any] = {"error": {"message": "stub failure"}}
                else:
                    payload = {
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": answer.content},
                            }
                        ]
                    }
                data = json.dumps(payload, ensure_ascii=False).encode()
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout tests)

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

    def prompt_texts(self) -> list[str]:
        return ["\n".join(m["content"] for m in request) for request in self.requests]
