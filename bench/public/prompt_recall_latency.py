"""Recall latency of the prompt's recall (``recall.ranking.evidence_windows``, the defaults)
against the windows it replaced (``top_n=3, window_size=2``), query embedding excluded: LoCoMo-dev
(five ~550-turn chats) stored once, every question recalled once each way first (the embedder's
cache then answers every text), then both ways timed in alternating rounds on the same database,
with the CPU of this process and of the embedded PostgreSQL. The method of
``bench.public.fusion_latency``.

    python -m bench.public.prompt_recall_latency [--cases 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
from collections.abc import Sequence

from bench.common import bench_data_dir, machine_line, print_recall_times
from bench.process_stats import load_average, timed_rounds
from bench.public import locomo
from bench.public.run import USERS_PER_SET, store
from memory_core import MemorySettings, open_memory
from memory_core.recall.options import RecallOptions
from memory_core.recall.retriever import Retriever

WAYS = {"windows (top 3 ±2)": (3, 2), "the prompt's recall (defaults)": (None, None)}


async def run(args: argparse.Namespace) -> None:
    print(f"== the prompt's recall latency ({machine_line()}), load {load_average()}")
    with bench_data_dir("prompt-recall-latency") as data_dir:
        settings = MemorySettings(memory_data_dir=data_dir, embedding_query_deadline=120)
        task = locomo.task(locomo.load(locomo.data_dir(None), settings.tz))
        memory = await open_memory(settings, maintenance_interval=None)
        try:
            retriever: Retriever = memory.parts.retriever  # a bench reads the parts
            base = USERS_PER_SET
            await store(memory, task, base, 1)
            cases = task.cases[: args.cases]
            queries = [(base + c.user, next(iter(c.queries.values())), c.now) for c in cases]

            async def ask(
                user: int, text: str, now: object, way: tuple[int | None, int | None]
            ) -> None:
                top_n, window = way
                options = RecallOptions(top_n=top_n, window_size=window, now=now)  # type: ignore[arg-type]
                await retriever.recall(user, text, options=options)

            for way in WAYS.values():  # every text embedded once
                for user, text, now in queries:
                    await ask(user, text, now, way)
            calls = [functools.partial(ask, user, text, now) for user, text, now in queries]
            times, cpu = await timed_rounds(WAYS, calls, args.rounds, data_dir)
            print(f"\n{task.name}: {len(queries)} questions × {args.rounds} rounds, hybrid")
            print_recall_times(times, cpu)
        finally:
            await memory.aclose()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
