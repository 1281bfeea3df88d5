"""Embeddings from an OpenAI-compatible ``POST {base_url}/embeddings`` endpoint.

Default: SiliconFlow with ``Qwen/Qwen3-Embedding-0.6B`` (1024-d). Works with any server that
speaks the OpenAI embeddings API (OpenAI, vLLM, Ollama, LM Studio, text-embeddings-inference).

Input rules, the same for every request:

* each text is cut to ``max_chars`` code points (a 100 KB message must not turn into a 400 for
  exceeding the model's token limit and take the whole batch down with it);
* NUL is removed and unpaired surrogates become U+FFFD (``sanitize_text``);
* a text that is empty after that is sent as a single space: OpenAI-style servers reject
  ``""`` with a 400, and failing a whole batch for one empty turn would lose the others.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import httpx
import numpy as np

from ...errors import ConfigError, EmbeddingError
from ...settings import MemorySettings
from .base import normalize_rows, sanitize_text

logger = logging.getLogger(__name__)

# Qwen3-Embedding was trained with an instruction on the query side only (model card);
# stored passages go in as they are. Other models get no prefix.
QWEN3_QUERY_PREFIX = (
    "Instruct: Given a chat message, retrieve earlier chat messages relevant to it\nQuery:"
)
API_MAX_CHARS = 4096
_EXCERPT_CHARS = 200

Sleep = Callable[[float], Awaitable[None]]


def default_query_prefix(model: str) -> str:
    """The query-side instruction recommended for ``model``, or ``""``."""
    return QWEN3_QUERY_PREFIX if model.startswith("Qwen/Qwen3-Embedding") else ""


class ApiEmbedder:
    """``Embedder`` over one caller-built ``httpx.AsyncClient``.

    The client carries base URL, auth header, timeout and limits; the embedder only adds the
    ``embeddings`` path. It closes the client in ``aclose`` only when ``owns_client`` is true
    (as ``build_api_embedder`` sets it).

    Retries: timeouts, connection errors, HTTP 429 and 5xx, at most ``max_retries`` times,
    sleeping ``backoff_base * 2**attempt`` (capped at ``max_delay``) with jitter, or the
    server's ``Retry-After`` (also capped). Every other 4xx fails at once.
    """

    def __init__(
        self,
        *,
        client: httpx.AsyncClient,
        model: str,
        dim: int,
        batch_size: int = 32,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        max_delay: float = 20.0,
        max_chars: int = API_MAX_CHARS,
        query_prefix: str | None = None,
        owns_client: bool = False,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"embedding batch size must be at least 1, got {batch_size}")
        self.model = model
        self.dim = dim
        self._client = client
        self._batch_size = batch_size
        self._max_retries = max(0, max_retries)
        self._backoff_base = backoff_base
        self._max_delay = max_delay
        self._max_chars = max_chars
        self._query_prefix = default_query_prefix(model) if query_prefix is None else query_prefix
        self._owns_client = owns_client
        self._sleep = sleep

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
        vectors = await self._embed_batch([self._query_prefix + self._prepare(text)])
        return vectors[0]

    async def aclose(self) -> None:
        """Close the HTTP client if this embedder owns it."""
        if self._owns_client:
            await self._client.aclose()

    def _prepare(self, text: str) -> str:
        return sanitize_text(text, self._max_chars) or " "

    async def _embed_batch(self, batch: list[str]) -> np.ndarray:
        body = {"model": self.model, "input": batch, "encoding_format": "float"}
        response = await self._post_with_retries(body)
        return self._parse(response, expected=len(batch))

    async def _post_with_retries(self, body: dict[str, Any]) -> httpx.Response:
        attempt = 0
        while True:
            try:
                response = await self._client.post("embeddings", json=body)
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                if attempt >= self._max_retries:
                    raise EmbeddingError(
                        f"embedding API unreachable after {attempt + 1} attempts: {exc!r}"
                    ) from exc
                delay = self._backoff(attempt)
                reason = type(exc).__name__
            # RuntimeError: httpx refuses to send on a closed client.
            except (httpx.HTTPError, RuntimeError) as exc:
                raise EmbeddingError(f"embedding request failed: {exc!r}") from exc
            else:
                status = response.status_code
                if status < 400:
                    return response
                if status != 429 and status < 500:
                    raise EmbeddingError(
                        f"embedding API refused the request: HTTP {status} "
                        f"(model {self.model}): {self._excerpt(response)}"
                    )
                if attempt >= self._max_retries:
                    raise EmbeddingError(
                        f"embedding API failed after {attempt + 1} attempts: HTTP {status}: "
                        f"{self._excerpt(response)}"
                    )
                retry_after = _retry_after_seconds(response.headers.get("retry-after"))
                if retry_after is None:
                    delay = self._backoff(attempt)
                else:
                    delay = min(retry_after, self._max_delay)
                reason = f"HTTP {status}"
            attempt += 1
            logger.warning(
                "embedding API: %s, retry %d/%d in %.2fs",
                reason,
                attempt,
                self._max_retries,
                delay,
            )
            await self._sleep(delay)

    def _backoff(self, attempt: int) -> float:
        ceiling = min(self._max_delay, self._backoff_base * 2**attempt)
        # "Equal jitter": at least half the step, so retries never bunch up at zero.
        return ceiling / 2 + random.uniform(0, ceiling / 2)

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
        text = " ".join(response.text.split())[:_EXCERPT_CHARS]
        # A server that echoes the request headers must not leak the key into logs.
        token = _bearer_token(self._client.headers.get("authorization"))
        return text.replace(token, "***") if token else text


def build_api_embedder(settings: MemorySettings) -> ApiEmbedder:
    """Build the API embedder and its own ``httpx.AsyncClient`` from ``settings``."""
    base_url = _checked_base_url(settings.embedding_base_url)
    headers: dict[str, str] = {}
    if settings.embedding_api_key is not None:
        headers["Authorization"] = f"Bearer {settings.embedding_api_key.get_secret_value()}"
    client = httpx.AsyncClient(
        base_url=base_url,
        headers=headers,
        timeout=httpx.Timeout(settings.embedding_timeout),
        limits=httpx.Limits(max_connections=8, max_keepalive_connections=4),
        # The core never reads the environment, so no proxy variables either.
        trust_env=False,
    )
    return ApiEmbedder(
        client=client,
        model=settings.effective_embedding_model,
        dim=settings.effective_embedding_dim,
        batch_size=settings.embedding_batch_size,
        max_retries=settings.embedding_max_retries,
        owns_client=True,
    )


def _checked_base_url(value: str) -> httpx.URL:
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as exc:
        raise ConfigError(f"invalid EMBEDDING_BASE_URL {value!r}: {exc}") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigError(
            f"invalid EMBEDDING_BASE_URL {value!r}: expected http(s)://host[/path], "
            "for example https://api.siliconflow.cn/v1"
        )
    return url


def _retry_after_seconds(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _bearer_token(header: str | None) -> str:
    if not header:
        return ""
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else header
