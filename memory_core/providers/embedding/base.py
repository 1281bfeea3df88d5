"""The ``Embedder`` protocol and the input/output hygiene every implementation shares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from ...errors import EmbeddingError


class Embedder(Protocol):
    """Turns text into L2-normalised float32 vectors of a fixed dimension.

    ``model`` and ``dim`` are recorded with every stored row, so switching either one is an
    explicit re-embed. Implementations raise ``EmbeddingError`` and nothing else.
    """

    model: str
    dim: int

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Embed stored text (chat turns); returns shape ``(len(texts), dim)``, float32."""
        ...

    async def embed_query(self, text: str) -> np.ndarray:
        """Embed a search query; returns shape ``(dim,)``, float32."""
        ...

    async def aclose(self) -> None:
        """Release what the embedder owns (model handle, HTTP client)."""
        ...


def normalize_rows(vectors: np.ndarray, *, source: str) -> np.ndarray:
    """Return ``vectors`` (n, dim) as contiguous float32 with unit L2 rows.

    Raises ``EmbeddingError`` naming ``source`` for non-finite values or zero rows, which
    would otherwise poison every cosine computed against them.
    """
    matrix = np.ascontiguousarray(vectors, dtype=np.float32)
    if matrix.ndim != 2:
        raise EmbeddingError(f"{source} returned an array of shape {matrix.shape}, not (n, dim)")
    if not np.isfinite(matrix).all():
        raise EmbeddingError(f"{source} returned non-finite values (NaN or inf)")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    if matrix.shape[0] and float(norms.min()) < 1e-12:
        raise EmbeddingError(f"{source} returned an all-zero vector")
    unit: np.ndarray = matrix / norms
    return unit
