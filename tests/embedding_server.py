"""A real OpenAI-compatible ``/v1/embeddings`` server on loopback that records its inputs."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from memory_core.errors import EmbeddingError
from memory_core.providers.embedding import ApiEmbedder
from memory_core.providers.openai_api import OpenAIEndpoint
from tests.fakes import HashingEmbedder


class EmbeddingServer:
    """Answers with ``HashingEmbedder`` vectors; every text it was asked to embed is kept in
    ``inputs``, every request counted; answers 500 while ``healthy`` is false."""

    def __init__(self, dim: int, *, healthy: bool = True) -> None:
        self.dim = dim
        self.healthy = healthy
        self.requests = 0
        self.inputs: list[str] = []
        hashing = HashingEmbedder(dim=dim)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def do_POST(self) -> None:
                outer.requests += 1
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not outer.healthy:
                    self.send_response(500)
                    self.end_headers()
                    self.wfile.write(b'{"error":"upstream overloaded"}')
                    return
                outer.inputs.extend(body["input"])
                data = [
                    {"index": i, "embedding": hashing._vector(text).tolist()}
                    for i, text in enumerate(body["input"])
                ]
                payload = json.dumps({"data": data, "model": body["model"]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def embedder(self, *, model: str = "test-embed", batch_size: int = 8) -> ApiEmbedder:
        """An API embedder talking to this server, retrying at once (no breaker cooldown)."""
        endpoint = OpenAIEndpoint(
            # A bound against a stuck test, never a timeout meant to be hit (the stand-in
            # answers at once or with a 500): a loaded machine must not turn it into one.
            httpx.AsyncClient(base_url=self.base_url, timeout=30),
            label="embedding API",
            error=EmbeddingError,
            max_retries=1,
            backoff_base=0.01,
            breaker_cooldown=0.0,
        )
        return ApiEmbedder(endpoint=endpoint, model=model, dim=self.dim, batch_size=batch_size)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
