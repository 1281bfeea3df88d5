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


def sanitize_text(text: str, max_chars: int) -> str:
    """Make ``text`` safe to encode as UTF-8 and bounded in size.

    Cuts to ``max_chars`` code points, removes NUL (a C string would stop there, PostgreSQL
    rejects it), joins surrogate halves that form a valid pair and replaces unpaired ones
    with U+FFFD (``str.encode("utf-8")`` raises on them).
    """
    text = text[:max_chars]
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # UTF-16 keeps surrogate code points as raw units, so decoding pairs them up again.
        text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return text


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
