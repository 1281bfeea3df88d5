"""Small stand-ins that implement the core's protocols without inheriting anything: the one
chat model every test and benchmark records prompts with, a hashing embedder, and the one way
HTTP APIs are stood in for (a ``Respond`` function, on httpx's ``MockTransport`` or served on
loopback by ``Loopback``)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections import deque
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import numpy as np

from memory_core.distill.memory import DistilledMemory
from memory_core.errors import EmbeddingError
from memory_core.providers.embedding import ApiEmbedder
from memory_core.providers.openai_api import OpenAIEndpoint


class HashingEmbedder:
    """Deterministic bag-of-character-bigrams embedder: texts sharing characters are close.

    Good enough to make recall tests exact and fast; the real models are tested separately.
    """

    def __init__(self, dim: int = 384, model: str = "test/hashing-bigrams") -> None:
        self.dim = dim
        self.model = model
        self.fail = False
        self.calls = 0

    def _vector(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dim, dtype=np.float32)
        grams = [text[i : i + 2] for i in range(max(1, len(text) - 1))]
        for gram in grams:
            digest = hashlib.blake2b(gram.encode("utf-8", "replace"), digest_size=8).digest()
            vector[int.from_bytes(digest[:4], "little") % self.dim] += 1.0
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm else vector

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        if self.fail:
            raise EmbeddingError("test embedder told to fail")
        return np.stack([self._vector(t) for t in texts]) if texts else np.zeros((0, self.dim))

    async def embed_query(self, text: str) -> np.ndarray:
        self.calls += 1
        if self.fail:
            raise EmbeddingError("test embedder told to fail")
        return self._vector(text)

    async def aclose(self) -> None:
        return None


Prompt = list[dict[str, str]]


class RecordingModel:
    """A ``ChatModel`` that records every prompt and answers ``answer``.

    ``answer`` is a text, or a function of the prompts recorded so far (this one included) for
    an answer that changes. ``fail``, when set, is raised instead of answering (after the prompt
    is recorded). ``gate``, when set, holds every answer until the test sets it (a model still
    thinking for as long as the test wants, never a delay to race); ``started`` is set as soon
    as a prompt arrives.
    """

    def __init__(self, answer: str | Callable[[Sequence[Prompt]], str] = "好的") -> None:
        self.answer = answer
        self.prompts: list[Prompt] = []
        self.fail: Exception | None = None
        self.gate: asyncio.Event | None = None
        self.started = asyncio.Event()

    async def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> str:
        self.prompts.append([dict(m) for m in messages])
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return self.answer if isinstance(self.answer, str) else self.answer(self.prompts)

    async def aclose(self) -> None:
        return None

    def text(self, index: int = -1) -> str:
        """The prompt ``index`` (the last by default) as one text, its messages one a line."""
        return "\n".join(m["content"] for m in self.prompts[index])


def stored_fact(content: str, at: datetime, **fields: Any) -> DistilledMemory:
    """A stored fact of user 1's private chat, as the store returns it; ``fields`` override."""
    values: dict[str, Any] = dict(
        id=1,
        kind="facts",
        session_key="1",
        user_id=1,
        group_id=None,
        content=content,
        category="personal_info",
        confidence=0.9,
        strength=None,
        evidence=(),
        key_topics=(),
        sentiment=None,
        action_items=(),
        source_turn_ids=(),
        first_seen=at,
        last_confirmed=at,
        times_mentioned=1,
        importance=0.9,
        access_count=0,
        last_accessed_at=None,
        valid_until=None,
        superseded_by=None,
        created_at=at,
    )
    values.update(fields)
    return DistilledMemory(**values)


# --- HTTP stand-ins ----------------------------------------------------------------------------
#
# Every stand-in for an HTTP API (chat, embeddings, rerank) is one ``Respond`` function from an
# ``httpx.Request`` to an ``httpx.Response``. A unit test hands it to its client as httpx's
# ``MockTransport`` (no socket, no thread); a test that needs the real wire (a client built from
# settings, a bot in a subprocess, a real read timeout) serves the same function on loopback
# with ``Loopback``.

Respond = Callable[[httpx.Request], Coroutine[Any, Any, httpx.Response]]


def json_response(
    status: int, payload: Any, headers: Mapping[str, str] | None = None
) -> httpx.Response:
    """An answer with a JSON body (``ensure_ascii=False``, as the providers send Chinese)."""
    body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
    return raw_response(status, body, headers)


def raw_response(
    status: int, body: bytes, headers: Mapping[str, str] | None = None
) -> httpx.Response:
    """An answer with ``body`` as it is, labelled JSON (a provider that sends garbage)."""
    return httpx.Response(
        status, content=body, headers={"Content-Type": "application/json", **(headers or {})}
    )


def request_json(request: httpx.Request) -> Any:
    """The JSON a client sent, or the raw bytes when they are not JSON."""
    raw = request.content
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def mock_transport(respond: Respond) -> httpx.MockTransport:
    """``respond`` as an httpx transport: the client's requests never leave the process."""
    return httpx.MockTransport(respond)


class Loopback:
    """Serves ``respond`` on a real HTTP/1.1 server on 127.0.0.1: a thread and an event loop
    per connection, so one answer that waits (a held model) holds up no other.

    An exception in ``respond`` drops the connection unanswered. ``close`` stops the server.
    Answers go out with ``TCP_NODELAY``, as the providers' servers send them: with Nagle's
    algorithm on (``nagle=True``) an answer's body, written after its headers, waits for the
    client's delayed ACK (up to 40 ms on Linux), which a benchmark would count as the bot's.
    """

    def __init__(self, respond: Respond, *, nagle: bool = False) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the providers' servers do
            disable_nagle_algorithm = not nagle
            loop: asyncio.AbstractEventLoop

            def setup(self) -> None:
                super().setup()
                self.loop = asyncio.new_event_loop()

            def finish(self) -> None:
                self.loop.close()
                super().finish()

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                request = httpx.Request(
                    "POST",
                    f"http://127.0.0.1{self.path}",
                    headers=list(self.headers.items()),
                    content=self.rfile.read(length),
                )
                try:
                    response = self.loop.run_until_complete(respond(request))
                except Exception:
                    self.close_connection = True
                    return
                body = response.content
                try:
                    self.send_response(response.status_code)
                    for name, value in response.headers.items():
                        if name.lower() not in ("content-length", "transfer-encoding"):
                            self.send_header(name, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up waiting (the timeout tests)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        # ``close`` waits up to one poll for the serving loop to notice; 0.5 s by default.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:PORT``; APIs add their own ``/v1``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


Reply = Respond
"""One scripted answer of a ``ScriptedAPI``."""


@dataclass(frozen=True)
class Received:
    """A request as the stand-in saw it: path, headers (lower-case names) and JSON body."""

    path: str
    headers: dict[str, str]
    body: Any


class ScriptedAPI:
    """An HTTP API that answers each request with the next ``Reply`` of its script, then with
    ``default``; every request is kept in ``received``. ``respond`` is its ``Respond``.

    ``hang()`` is a reply that comes only once the test is over (``release``, which the
    fixture calls), so a client surely gives up first however slow the machine;
    ``fail_with(exc)`` raises what httpx's own transport raises (a timeout, a refused
    connection) without a socket or a timer.
    """

    def __init__(self, default: Reply) -> None:
        self.default = default
        self.script: deque[Reply] = deque()
        self.received: list[Received] = []
        self.released = threading.Event()

    def reset(self, *replies: Reply) -> None:
        self.received.clear()
        self.script = deque(replies)

    async def respond(self, request: httpx.Request) -> httpx.Response:
        headers = {name.lower(): value for name, value in request.headers.items()}
        self.received.append(Received(request.url.path, headers, request_json(request)))
        reply = self.script.popleft() if self.script else self.default
        return await reply(request)

    def hang(self, then: Reply | None = None) -> Reply:
        async def reply(request: httpx.Request) -> httpx.Response:
            await asyncio.to_thread(self.released.wait, 300)  # a bound against a stuck test
            return await (then or self.default)(request)

        return reply

    def release(self) -> None:
        self.released.set()


def json_reply(status: int, payload: Any, headers: Mapping[str, str] | None = None) -> Reply:
    """A reply that answers ``payload`` as JSON with ``status`` (a new response each time)."""

    async def reply(request: httpx.Request) -> httpx.Response:
        return json_response(status, payload, headers)

    return reply


def raw_reply(status: int, body: bytes, headers: Mapping[str, str] | None = None) -> Reply:
    """A reply that answers ``body`` as it is with ``status``."""

    async def reply(request: httpx.Request) -> httpx.Response:
        return raw_response(status, body, headers)

    return reply


def fail_with(error: type[httpx.TransportError]) -> Reply:
    """A reply that raises ``error`` as httpx's transport would (``httpx.ReadTimeout``,
    ``httpx.ConnectError``)."""

    async def reply(request: httpx.Request) -> httpx.Response:
        raise error(f"stand-in: {error.__name__}", request=request)

    return reply


@dataclass(frozen=True)
class Answer:
    """What a ``ScriptedLLM`` answers; with ``held`` the answer waits until that event is set
    (a model that is still thinking, for as long as the test wants, instead of a fixed delay
    to race)."""

    content: str = ""
    status: int = 200
    held: threading.Event | None = None


class ScriptedLLM:
    """A real OpenAI-compatible chat server on loopback whose answers a test scripts, for the
    clients the core builds from settings (extraction, evaluation, a bot in a subprocess):
    ``responder(messages) -> Answer``; every request's messages are kept in ``requests``."""

    def __init__(self, responder: Callable[[list[dict[str, str]]], Answer]) -> None:
        self.responder = responder
        self.requests: list[list[dict[str, str]]] = []
        self._loopback = Loopback(self.respond)

    async def respond(self, request: httpx.Request) -> httpx.Response:
        messages = json.loads(request.content)["messages"]
        self.requests.append(messages)
        # The responder may block (it may wait for other requests): off the serving loop.
        answer = await asyncio.to_thread(self.responder, messages)
        if answer.held is not None:
            await asyncio.to_thread(answer.held.wait, 300)  # a bound against a stuck test only
        if answer.status != 200:
            return json_response(answer.status, {"error": {"message": "stub failure"}})
        choice = {"index": 0, "message": {"role": "assistant", "content": answer.content}}
        return json_response(200, {"choices": [choice]})

    @property
    def base_url(self) -> str:
        return f"{self._loopback.origin}/v1"

    def close(self) -> None:
        self._loopback.close()

    def prompt_texts(self) -> list[str]:
        return ["\n".join(m["content"] for m in request) for request in self.requests]


class HashingEmbeddingAPI:
    """An OpenAI-compatible ``/v1/embeddings`` answering with ``HashingEmbedder`` vectors, on
    httpx's ``MockTransport``; every text it was asked to embed is kept in ``inputs``, every
    request counted; answers 500 while ``healthy`` is false."""

    def __init__(self, dim: int, *, healthy: bool = True) -> None:
        self.dim = dim
        self.healthy = healthy
        self.requests = 0
        self.inputs: list[str] = []
        self._hashing = HashingEmbedder(dim=dim)

    async def respond(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        body = json.loads(request.content)
        if not self.healthy:
            return json_response(500, {"error": "upstream overloaded"})
        self.inputs.extend(body["input"])
        data = [
            {"index": i, "embedding": self._hashing._vector(text).tolist()}
            for i, text in enumerate(body["input"])
        ]
        return json_response(200, {"data": data, "model": body["model"]})

    def embedder(self, *, model: str = "test-embed", batch_size: int = 8) -> ApiEmbedder:
        """An API embedder talking to this stand-in, retrying at once (no breaker cooldown)."""
        endpoint = OpenAIEndpoint(
            httpx.AsyncClient(
                base_url="https://embeddings.example.test/v1",
                transport=mock_transport(self.respond),
            ),
            label="embedding API",
            error=EmbeddingError,
            max_retries=1,
            backoff_base=0.01,
            breaker_cooldown=0.0,
        )
        return ApiEmbedder(endpoint=endpoint, model=model, dim=self.dim, batch_size=batch_size)
