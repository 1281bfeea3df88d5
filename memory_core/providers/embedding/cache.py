"""An in-process LRU cache in front of any ``Embedder``."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np

from ...errors import EmbeddingError
from ..openai_api import is_failing
from .base import Embedder

Kind = Literal["passage", "query"]
# Keys hold a digest, not the text: 4096 entries of 100 KB messages would pin 400 MB.
_Key = tuple[str, bytes]
# One message asks for the same query vector more than once (the dialogue search, then the
# facts). When the first ask failed (the embedder down, or past its deadline) the second
# would only wait as long again: a query that failed is refused at once for this long.
QUERY_FAILURE_MEMORY = 10.0
_MAX_FAILURES_KEPT = 1024


def _retrieved(future: asyncio.Future[np.ndarray]) -> None:
    """Mark a shared query's failure as seen: nobody may have been waiting for it."""
    if not future.cancelled():
        future.exception()


def _key(kind: Kind, text: str) -> _Key:
    data = text.encode("utf-8", "surrogatepass")
    return kind, hashlib.blake2b(data, digest_size=16).digest()


class CachedEmbedder:
    """``Embedder`` that remembers the last ``max_entries`` vectors of ``inner``.

    Passages and queries are cached apart (e5 and Qwen3 embed them differently). All misses
    of one ``embed_passages`` call go to ``inner`` as one call. A query ``inner`` failed to
    embed fails at once for ``failure_memory`` seconds. ``max_entries=0`` turns the
    cache off. A query asked for while ``inner`` embeds the same one waits for that embedding
    (a message's dialogue search and its facts search ask at once); two concurrent passage
    calls missing the same text both reach ``inner``, which costs one duplicate embedding,
    never a wrong one.
    """

    def __init__(
        self,
        inner: Embedder,
        max_entries: int,
        *,
        failure_memory: float = QUERY_FAILURE_MEMORY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.model = inner.model
        self.dim = inner.dim
        self._inner = inner
        self._max_entries = max(0, max_entries)
        self._entries: OrderedDict[_Key, np.ndarray] = OrderedDict()
        self._hits = 0
        self._misses = 0
        self._failure_memory = failure_memory
        self._clock = clock
        self._failed: dict[_Key, tuple[float, str]] = {}  # query -> (when, why)
        self._embedding: dict[_Key, asyncio.Future[np.ndarray]] = {}  # queries being embedded

    @property
    def failing(self) -> bool:
        """Whether the embedder behind the cache says its endpoint keeps failing."""
        return is_failing(self._inner)

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Embed stored turns, asking ``inner`` only for texts not cached."""
        keys = [_key("passage", text) for text in texts]
        found: dict[_Key, np.ndarray] = {}
        missing: dict[_Key, str] = {}
        for key, text in zip(keys, texts, strict=True):
            if key in found or key in missing:
                continue
            vector = self._lookup(key)
            if vector is None:
                missing[key] = text
            else:
                found[key] = vector
        # Every position whose vector was not cached counts as a miss, duplicates included.
        self._hits += sum(1 for key in keys if key in found)
        self._misses += sum(1 for key in keys if key in missing)
        if missing:
            fresh = await self._inner.embed_passages(list(missing.values()))
            if fresh.shape != (len(missing), self.dim):
                raise EmbeddingError(
                    f"inner embedder returned shape {fresh.shape}, "
                    f"expected {(len(missing), self.dim)}"
                )
            for key, vector in zip(missing, fresh, strict=True):
                found[key] = self._store(key, vector)
        if not keys:
            return np.empty((0, self.dim), dtype=np.float32)
        return np.stack([found[key] for key in keys])

    async def embed_query(self, text: str) -> np.ndarray:
        """Embed a search query, from the cache when the same query was seen recently."""
        key = _key("query", text)
        vector = self._lookup(key)
        if vector is not None:
            self._hits += 1
            return vector.copy()
        underway = self._embedding.get(key)
        if underway is not None:
            try:
                shared = await asyncio.shield(underway)
            except asyncio.CancelledError:
                if not underway.cancelled():
                    raise  # this call was cancelled
                return await self.embed_query(text)  # the first asker gave up: ask again
            self._hits += 1
            return shared.copy()
        failed = self._failed.get(key)
        if failed is not None and self._clock() - failed[0] < self._failure_memory:
            raise EmbeddingError(f"query not embedded a moment ago: {failed[1]}")
        self._misses += 1
        sharing: asyncio.Future[np.ndarray] = asyncio.get_running_loop().create_future()
        sharing.add_done_callback(_retrieved)
        self._embedding[key] = sharing
        try:
            fresh = await self._inner.embed_query(text)
        except EmbeddingError as exc:
            if len(self._failed) >= _MAX_FAILURES_KEPT:
                self._failed.clear()
            self._failed[key] = (self._clock(), str(exc))
            sharing.set_exception(exc)
            raise
        except BaseException:
            sharing.cancel()  # cancelled, or an error no caller expects: the others ask again
            raise
        finally:
            if self._embedding.get(key) is sharing:
                del self._embedding[key]
        self._failed.pop(key, None)
        stored = self._store(key, fresh)
        sharing.set_result(stored)
        return stored.copy()

    async def aclose(self) -> None:
        """Forget every entry and close ``inner``."""
        self._entries.clear()
        await self._inner.aclose()

    def stats(self) -> dict[str, int]:
        """Counters for ``/memstat``: hits, misses, current and maximum entries."""
        return {
            "hits": self._hits,
            "misses": self._misses,
            "entries": len(self._entries),
            "max_entries": self._max_entries,
        }

    def _lookup(self, key: _Key) -> np.ndarray | None:
        vector = self._entries.get(key)
        if vector is not None:
            self._entries.move_to_end(key)
        return vector

    def _store(self, key: _Key, vector: np.ndarray) -> np.ndarray:
        # Read-only so a caller writing into a returned array cannot corrupt the cache.
        vector = np.array(vector, dtype=np.float32)
        vector.setflags(write=False)
        if self._max_entries:
            self._entries[key] = vector
            self._entries.move_to_end(key)
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
        return vector
