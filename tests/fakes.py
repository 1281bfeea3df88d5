"""Small stand-ins that implement the core's protocols without inheriting anything."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np


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
        from memory_core.errors import EmbeddingError

        self.calls += 1
        if self.fail:
            raise EmbeddingError("test embedder told to fail")
        return np.stack([self._vector(t) for t in texts]) if texts else np.zeros((0, self.dim))

    async def embed_query(self, text: str) -> np.ndarray:
        from memory_core.errors import EmbeddingError

        self.calls += 1
        if self.fail:
            raise EmbeddingError("test embedder told to fail")
        return self._vector(text)

    async def aclose(self) -> None:
        return None
