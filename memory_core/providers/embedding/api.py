"""Embeddings from an OpenAI-compatible ``POST {base_url}/embeddings`` endpoint.

Default: SiliconFlow with ``Qwen/Qwen3-Embedding-0.6B`` (1024-d). Works with any server that
speaks the OpenAI embeddings API (OpenAI, vLLM, Ollama, LM Studio, text-embeddings-inference).

Input rules, the same for every request:

* each text is cut to ``max_chars`` code points (a 100 KB message must not turn into a 400 for
  exceeding the model's token limit and take the whole batch down with it);
* NUL is removed and unpaired surrogates become U+FFFD (``lang.text.scrub``);
* a text that is empty after that is sent as a single space: OpenAI-style servers reject
  ``""`` with a 400, and failing a whole batch for one empty turn would lose the others.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx
import numpy as np

from ...errors import ConfigError, EmbeddingError
from ...lang.text import scrub
from ...settings import MemorySettings
from ..openai_api import OpenAIEndpoint, open_http_client
from .base import normalize_rows

# Qwen3-Embedding was trained with an instruction on the query side only (model card);
# stored passages go in as they are. Other models get no prefix.
QWEN3_QUERY_PREFIX = (
    "Instruct: Given a chat message, retrieve earlier chat messages relevant to it\nQuery:"
)
API_MAX_CHARS = 4096
# Retries of a failed embedding call: stored turns wait for the backfill when they run out, so
# a few with backoff are enough.
EMBEDDING_MAX_RETRIES = 3
# Seconds one embedding request may take (a setting until 2026-12-07 that no operator
# changed): a reply waits only EMBEDDING_QUERY_DEADLINE for its query, a stored turn only
# EMBEDDING_STORE_DEADLINE; this bounds the background's batches, which nobody waits for.
REQUEST_TIMEOUT = 15.0


def default_query_prefix(model: str) -> str:
    """The query-side instruction recommended for ``model``, or ``""``."""
    return QWEN3_QUERY_PREFIX if model.startswith("Qwen/Qwen3-Embedding") else ""


class ApiEmbedder:
    """``Embedder`` over one ``OpenAIEndpoint`` (its retry rules are ``openai_api``'s); closes
    the endpoint in ``aclose``."""

    def __init__(
        self,
        *,
        endpoint: OpenAIEndpoint,
        model: str,
        dim: int,
        batch_size: int = 32,
        max_chars: int = API_MAX_CHARS,
        query_prefix: str | None = None,
        query_deadline: float | None = None,
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"embedding batch size must be at least 1, got {batch_size}")
        self.model = model
        self.dim = dim
        self._endpoint = endpoint
        self._batch_size = batch_size
        self._max_chars = max_chars
        self._query_prefix = default_query_prefix(model) if query_prefix is None else query_prefix
        # A query is embedded while someone waits for a reply: past this, recall goes on by
        # keywords alone rather than keep them waiting.
        self._query_deadline = query_deadline

    @property
    def failing(self) -> bool:
        """Whether the endpoint keeps failing (see ``OpenAIEndpoint.failing``)."""
        return self._endpoint.failing

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Embed stored turns, ``batch_size`` texts per request; shape ``(n, dim)``."""
        prepared = [self._prepare(text) for text in texts]
        if not prepared:
            return np.empty((0, self.dim), dtype=np.float32)
        parts = [
            await self._embed_batch(prepared[start : start + self._batch_size])
            for start in range(0, len(prepared), self._batch_size)
        ]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    async def embed_query(self, text: str) -> np.ndarray:
        """Embed a search query (with the model's query instruction); shape ``(dim,)``."""
        vectors = await self._embed_batch(
            [self._query_prefix + self._prepare(text)], deadline=self._query_deadline
        )
        vector: np.ndarray = vectors[0]
        return vector

    async def aclose(self) -> None:
        await self._endpoint.aclose()

    def _prepare(self, text: str) -> str:
        return scrub(text[: self._max_chars]) or " "

    async def _embed_batch(self, batch: list[str], deadline: float | None = None) -> np.ndarray:
        body = {"model": self.model, "input": batch, "encoding_format": "float"}
        response = await self._endpoint.post("embeddings", body, deadline=deadline)
        return self._parse(response, expected=len(batch))

    def _parse(self, response: httpx.Response, *, expected: int) -> np.ndarray:
        try:
            payload = response.json()
            items = payload["data"]
            if not isinstance(items, list):
                raise TypeError("'data' is not a list")
            if items and all(isinstance(item.get("index"), int) for item in items):
                items = sorted(items, key=lambda item: item["index"])
            rows = [item["embedding"] for item in items]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise EmbeddingError(
                f"embedding API answered with an unreadable body: {exc!r}: "
                f"{self._excerpt(response)}"
            ) from exc
        if len(rows) != expected:
            raise EmbeddingError(
                f"embedding API returned {len(rows)} vectors for {expected} inputs"
            )
        widths = {len(row) if isinstance(row, list) else -1 for row in rows}
        if widths != {self.dim}:
            got = ", ".join(str(width) for width in sorted(widths))
            raise EmbeddingError(
                f"embedding API returned {got}-dimensional vectors for model {self.model}, "
                f"but the configured dimension is {self.dim} (set EMBEDDING_DIM to match)"
            )
        try:
            matrix = np.asarray(rows, dtype=np.float32)
        except (ValueError, TypeError) as exc:
            raise EmbeddingError(f"embedding API returned non-numeric vectors: {exc}") from exc
        return normalize_rows(matrix, source="embedding API")

    def _excerpt(self, response: httpx.Response) -> str:
        return self._endpoint.excerpt(response.text)


def build_api_embedder(settings: MemorySettings) -> ApiEmbedder:
    """Build the API embedder and its own HTTP client from ``settings``."""
    client = open_http_client(
        base_url=settings.embedding_base_url,
        api_key=settings.embedding_api_key,
        timeout=REQUEST_TIMEOUT,
        setting_prefix="EMBEDDING",
        max_connections=8,
    )
    endpoint = OpenAIEndpoint(
        client,
        label="embedding API",
        error=EmbeddingError,
        max_retries=EMBEDDING_MAX_RETRIES,
        max_delay=20.0,
    )
    return ApiEmbedder(
        endpoint=endpoint,
        model=settings.effective_embedding_model,
        dim=settings.effective_embedding_dim,
        batch_size=settings.embedding_batch_size,
        query_deadline=settings.embedding_query_deadline,
    )
