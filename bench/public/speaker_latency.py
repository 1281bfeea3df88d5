"""Recall latency with and without the speakers a query names (``MEMORY_SPEAKER_WEIGHT``),
query embedding excluded: LoCoMo-dev stored once, every question embedded once beforehand (the
embedder's cache then answers), then each configuration's recalls of the same questions timed
in alternating rounds on the same database, with the CPU of this process and of the embedded
PostgreSQL (issue 26 part 2: "recall latency within 1.5× of today's").

    python -m bench.public.speaker_latency [--questions 200] [--rounds 3] [--weight 1] [--nobody]

``--nobody``: the questions with the speakers' names taken out, so that they name nobody: what
the setting costs a message that names no participant (the read of the chat's sender names).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dataclasses
import functools
from collections.abc import Sequence

from bench.common import bench_data_dir, machine_line, print_recall_times
from bench.process_stats import load_average, timed_rounds
from bench.public import locomo
from bench.public.run import USERS_PER_SET, store
from memory_core import MemorySettings, open_memory
from memory_core.lang.names import without_names
from memory_core.recall.options import RecallOptions
from memory_core.recall.retriever import Retriever


async def run(args: argparse.Namespace) -> None:
    print(f"== speaker-name recall latency ({machine_line()}), load {load_average()}")
    with bench_data_dir("speaker-latency") as data_dir:
        settings = MemorySettings(
            memory_data_dir=data_dir, embedding_query_deadline=120, memory_speaker_weight=0
        )
        task = locomo.task(locomo.load(locomo.data_dir(args.locomo_dir), settings.tz))
        memory = await open_memory(settings, maintenance_interval=None)
        try:
            await store(memory, task, USERS_PER_SET, 1)
            shipped: Retriever = memory.parts.retriever  # a bench reads the parts
            named = copy.copy(shipped)
            named.settings = settings.model_copy(update={"memory_speaker_weight": args.weight})
            configs = {
                "off (0, recall before this change)": shipped,
                f"MEMORY_SPEAKER_WEIGHT={args.weight:g}": named,
            }
            cases = task.cases[: args.questions]
            if args.nobody:
                speakers = sorted({i.speaker for i in task.items if i.speaker})
                cases = [
                    dataclasses.replace(
                        c, queries={"question": without_names(c.queries["question"], speakers)}
                    )
                    for c in cases
                ]
            options = [
                RecallOptions(top_n=locomo.TOP_N, window_size=locomo.WINDOW, now=c.now)
                for c in cases
            ]
            # Embed every question (as the named configuration searches it, and as written).
            for retriever in configs.values():
                for case, option in zip(cases, options, strict=True):
                    await retriever.recall(
                        USERS_PER_SET + case.user, case.queries["question"], options=option
                    )
            calls = [
                functools.partial(_ask, USERS_PER_SET + case.user, case.queries["question"], option)
                for case, option in zip(cases, options, strict=True)
            ]
            times, cpu = await timed_rounds(configs, calls, args.rounds, data_dir)
            named_how = "naming nobody (--nobody)" if args.nobody else "as written"
            print(
                f"{len(cases)} questions {named_how} × {args.rounds} rounds, hybrid, "
                f"top {locomo.TOP_N} ±{locomo.WINDOW}, load {load_average()}"
            )
            print_recall_times(times, cpu)
        finally:
            await memory.aclose()


async def _ask(user: int, text: str, options: RecallOptions, retriever: Retriever) -> None:
    await retriever.recall(user, text, options=options)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--weight", type=float, default=1.0)
    parser.add_argument("--locomo-dir", default=None)
    parser.add_argument("--nobody", action="store_true", help="the questions without the names")
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
