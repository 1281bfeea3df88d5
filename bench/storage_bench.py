"""Storage and recall at scale: bulk import, recall latency, online inserts, bytes per row.

Vectors are synthetic and precomputed, so the figures are the database part of the work.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from datetime import timedelta

import numpy as np

from bench.common import (
    T0,
    RandomQueryEmbedder,
    bench_data_dir,
    fmt,
    machine_line,
    peak_rss_mb,
    percentiles,
    synthetic_turns,
    unit_vectors,
)
from memory_core import TemporalMemory, open_memory
from memory_core.models import TurnInput
from memory_core.recall.options import RecallOptions
from memory_core.settings import MemorySettings

CHUNK = 20_000


async def bulk_import(
    memory: TemporalMemory, rows: int, sessions: int, dim: int, heavy_share: float
) -> float:
    """Returns COPY rows/s."""
    rng = np.random.default_rng(1)
    copy_seconds = 0.0
    for start in range(0, rows, CHUNK):
        count = min(CHUNK, rows - start)
        turns = synthetic_turns(start, count, sessions, rng, heavy_share)
        vectors = unit_vectors(count, dim, rng)
        started = time.perf_counter()
        await memory.parts.writer.add_dialogues(turns, embeddings=vectors, batch_size=CHUNK)
        copy_seconds += time.perf_counter() - started
        done = start + count
        print(f"\r  imported {done}/{rows} ({done / copy_seconds:.0f} rows/s)", end="", flush=True)
    print()
    return rows / copy_seconds


async def recall_latency(
    memory: TemporalMemory, rows: int, sessions: int, queries: int, heavy: bool
) -> dict[str, float]:
    now = T0 + timedelta(seconds=rows + 1)
    rnd = random.Random(3)
    samples = []
    for _ in range(queries):
        group: int | None
        if heavy:
            user, group = 1, 999_999
        else:
            s = rnd.randrange(sessions)
            user, group = 10_000 + s, (500_000 + s // 3) if s % 2 else None
        started = time.perf_counter()
        result = await memory.parts.retriever.recall(
            user, "查询", group, RecallOptions(top_n=3, window_size=2, now=now)
        )
        samples.append((time.perf_counter() - started) * 1000)
        assert len(result.windows) >= 1
    return percentiles(samples)


async def online_inserts(
    memory: TemporalMemory,
    count: int,
    concurrency: int,
    first_message_id: int,
    session: tuple[int, int | None] = (42, None),
) -> float:
    """New turns one by one into ``session`` (user, group), message ids from
    ``first_message_id`` (none may exist yet)."""

    async def one(i: int) -> None:
        outcome = await memory.parts.writer.add_turn(
            TurnInput(
                user_id=session[0],
                group_id=session[1],
                role="user",
                content=f"在线插入 {i}",
                message_id=first_message_id + i,
                self_id=1,
            )
        )
        assert outcome.turn is not None, "a duplicate: the figure would time no insert"

    started = time.perf_counter()
    for start in range(0, count, concurrency):
        await asyncio.gather(*(one(i) for i in range(start, min(count, start + concurrency))))
    return count / (time.perf_counter() - started)


async def bytes_per_row(memory: TemporalMemory) -> tuple[float, dict[str, int]]:
    async with memory.parts.database.pool.acquire() as conn:  # bench-only peek at sizes
        total = await conn.fetchval("SELECT pg_total_relation_size('dialogues')")
        rows = await conn.fetchval("SELECT count(*) FROM dialogues")
        parts = {
            r["name"]: r["bytes"]
            for r in await conn.fetch(
                "SELECT relname AS name, pg_relation_size(oid) AS bytes FROM pg_class "
                "WHERE relname = 'dialogues' OR relname LIKE 'dialogues\\_%' ORDER BY 2 DESC"
            )
        }
    return total / max(rows, 1), parts


async def inserts(
    memory: TemporalMemory, label: str, first_message_id: int, session: tuple[int, int | None]
) -> None:
    seq = await online_inserts(memory, 1000, 1, first_message_id, session)
    conc = await online_inserts(memory, 2000, 8, first_message_id + 1000, session)
    print(
        f"online single inserts {label}: {seq:.0f} rows/s sequential, "
        f"{conc:.0f} rows/s with 8 concurrent"
    )


async def sizes(memory: TemporalMemory, label: str) -> None:
    per_row, parts = await bytes_per_row(memory)
    print(f"bytes per row {label} (table + TOAST + indexes): {per_row:.0f}")
    for name, size in parts.items():
        if size >= 2**20:
            print(f"    {name}: {size / 2**20:.1f} MB")


async def run(rows: int, sessions: int, dim: int, queries: int, heavy_share: float) -> None:
    print(f"== storage bench: {rows} rows, {sessions} sessions, {dim}-d ({machine_line()})")
    with bench_data_dir("storage") as data_dir:

        async def opened(index_mode: str) -> TemporalMemory:
            settings = MemorySettings(
                memory_data_dir=data_dir,
                embedding_dim=dim,
                embedding_provider="api",
                memory_vector_index=index_mode,  # type: ignore[arg-type]
            )
            return await open_memory(
                settings, embedder=RandomQueryEmbedder(dim), maintenance_interval=None
            )

        # Phase 1: no HNSW index, as long as no session passes MEMORY_EXACT_SEARCH_MAX_ROWS.
        memory = await opened("never")
        try:
            rate = await bulk_import(memory, rows, sessions, dim, heavy_share)
            print(f"bulk import (COPY, pre-embedded, no HNSW index): {rate:.0f} rows/s")
            async with memory.parts.database.pool.acquire() as conn:
                await conn.execute("VACUUM ANALYZE dialogues")
            await recall_latency(memory, rows, sessions, 50, heavy=False)  # warm-up
            normal = await recall_latency(memory, rows, sessions, queries, heavy=False)
            print(f"recall top_n=3 window=2, ~{rows // sessions} rows/session: {fmt(normal)}")
            if heavy_share:
                big = await recall_latency(memory, rows, sessions, 50, True)
                print(f"recall in the heavy session, exact (no index yet): {fmt(big)}")
            await inserts(memory, "(no HNSW index)", 10**9, (42, None))
            await sizes(memory, "without HNSW indexes")
        finally:
            await memory.aclose()
        if not heavy_share:
            print(f"peak RSS of this process: {peak_rss_mb():.0f} MB")
            return

        # Phase 2: MEMORY_VECTOR_INDEX=auto indexes the heavy session, the one above the limit.
        memory = await opened("auto")
        try:
            started = time.perf_counter()
            async with memory.parts.upkeep.vector_index_deferred():  # what a bulk import ends with
                pass
            print(
                "HNSW index of the sessions above the limit "
                f"({sorted(memory.parts.vector_index.indexed)}): "
                f"built in {time.perf_counter() - started:.1f} s"
            )
            big = await recall_latency(memory, rows, sessions, max(50, queries // 5), True)
            print(f"recall in the heavy session (~{int(rows * heavy_share)} rows): {fmt(big)}")
            await inserts(memory, "into the indexed heavy session", 2 * 10**9, (1, 999_999))
            await inserts(memory, "into an ordinary session", 3 * 10**9, (43, None))
            await sizes(memory, "with the heavy session indexed")
            print(f"peak RSS of this process: {peak_rss_mb():.0f} MB")
        finally:
            await memory.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=1_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=1_000)
    parser.add_argument(
        "--heavy-share",
        type=float,
        default=0.0,
        help="share of rows in one chatty session (exercises the index path)",
    )
    args = parser.parse_args(argv)
    asyncio.run(run(args.rows, args.sessions, args.dim, args.queries, args.heavy_share))


if __name__ == "__main__":
    main()
