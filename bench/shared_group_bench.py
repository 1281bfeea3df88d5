"""Recall in a shared group (``/群共享 开``): one member's session against the whole group.

A shared group is searched exactly over all of its members' rows (no per-session index spans a
group), so its recall time grows with the group's size. One team group of ``--members`` members
is filled to each size in ``--group-rows`` among ``--background`` rows of other chats; each
size times a member's recall with sharing off (their own session) and on (the whole group).
Vectors are synthetic, so only the database part of recall is timed.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import timedelta

import numpy as np

from bench.common import (
    T0,
    RandomQueryEmbedder,
    add_with_random_vectors,
    bench_data_dir,
    fmt,
    machine_line,
    percentiles,
    synthetic_turns,
)
from memory_core import TemporalMemory, open_memory
from memory_core.models import TurnInput
from memory_core.recall.options import RecallOptions
from memory_core.settings import MemorySettings

TEAM = 777_777
CHUNK = 20_000


def team_turns(start: int, count: int, members: int) -> list[TurnInput]:
    return [
        TurnInput(
            user_id=1 + i % members,
            group_id=TEAM,
            role="user" if (i // members) % 2 == 0 else "assistant",
            content=f"群里第{i}条",
            message_id=10**9 + i,
            self_id=10001,
            created_at=T0 + timedelta(seconds=i),
        )
        for i in range(start, start + count)
    ]


async def timed_recall(memory: TemporalMemory, queries: int) -> dict[str, float]:
    now = T0 + timedelta(days=365)
    samples = []
    for _ in range(queries):
        started = time.perf_counter()
        result = await memory.parts.retriever.recall(
            1, "查询", TEAM, RecallOptions(top_n=3, window_size=2, now=now)
        )
        samples.append((time.perf_counter() - started) * 1000)
        assert len(result.windows) >= 1
    return percentiles(samples)


async def run(sizes: list[int], members: int, background: int, dim: int, queries: int) -> None:
    print(f"== shared-group bench: {members} members, {background} other rows ({machine_line()})")
    with bench_data_dir("shared") as data_dir:
        settings = MemorySettings(
            memory_data_dir=data_dir, embedding_dim=dim, embedding_provider="api"
        )
        memory = await open_memory(
            settings, embedder=RandomQueryEmbedder(dim), maintenance_interval=None
        )
        try:
            rng = np.random.default_rng(1)
            for start in range(0, background, CHUNK):
                count = min(CHUNK, background - start)
                turns = synthetic_turns(start, count, 1000, rng)
                await add_with_random_vectors(memory, turns, np.random.default_rng(start), CHUNK)
            filled = 0
            for size in sorted(sizes):
                team = team_turns(filled, size - filled, members)
                vectors_rng = np.random.default_rng(10**6 + size)
                await add_with_random_vectors(memory, team, vectors_rng, CHUNK)
                filled = size
                async with (
                    memory.parts.database.pool.acquire() as conn
                ):  # bench-only: fresh statistics
                    await conn.execute("VACUUM ANALYZE dialogues")
                for shared in (False, True):
                    await memory.parts.sharing.switch(TEAM, on=shared, by=None)
                    await timed_recall(memory, 10)  # warm-up
                    figures = await timed_recall(memory, queries)
                    scope = "whole group (shared)" if shared else "own session"
                    print(f"group of {size} rows, recall in the {scope}: {fmt(figures)}")
        finally:
            await memory.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--group-rows", default="1000,10000,50000")
    parser.add_argument("--members", type=int, default=20)
    parser.add_argument("--background", type=int, default=50_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.group_rows.split(",")]
    asyncio.run(run(sizes, args.members, args.background, args.dim, args.queries))


if __name__ == "__main__":
    main()
