"""Recall latency of the shipped recall beside other configurations (today: without statements
first, ``recall.statements``, one more read of the ranked head's turns a recall; earlier the
per-query message share and fusion choices of issue 26), query embedding excluded: Chit-Chat
(four people's sessions of ~1,700 turns) and MADial zh's topic change cases stored once, every
case's conversational query recalled once beforehand (the embedder's cache then answers every
text), then each configuration's recalls of the same cases timed in alternating rounds on the
same database, with the CPU of this process and of the embedded PostgreSQL. The method of
``bench.public.speaker_latency``.

    python -m bench.public.fusion_latency [--cases 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
from collections.abc import Iterator, Sequence
from typing import Any

from bench.common import bench_data_dir, machine_line, print_recall_times
from bench.process_stats import load_average, timed_rounds
from bench.public import chitchat, madial
from bench.public.run import USERS_PER_SET, madial_root, store
from bench.public.scoring import Case
from memory_core import MemorySettings, open_memory
from memory_core.models import RecallResult
from memory_core.recall import retriever as retriever_module
from memory_core.recall.options import RecallOptions
from memory_core.recall.retriever import Retriever

# (MEMORY_FUSION=agreement, timed here on 2026-12-05, and MEMORY_QUERY_MESSAGE_WEIGHT=rare with
# and without MEMORY_RARE_TERM_TURNS=2, lost out of sample and were removed; their figures are in
# bench/RESULTS.md. Add a configuration to ``configs`` in ``run`` to time it beside the shipped
# recall.)


async def _as_ranked(database: Any, ranked: Sequence[Any], **_: Any) -> Any:
    return list(ranked)


@contextlib.contextmanager
def _without_statements() -> Iterator[None]:
    kept = getattr(retriever_module, "statements_first")  # noqa: B009  # the hook's name
    setattr(retriever_module, "statements_first", _as_ranked)  # noqa: B010
    try:
        yield
    finally:
        setattr(retriever_module, "statements_first", kept)  # noqa: B010


class WithoutStatements:
    """The retriever as it was before statements came first (calls run one at a time)."""

    def __init__(self, retriever: Retriever) -> None:
        self._retriever = retriever

    async def recall(self, *args: Any, **kwargs: Any) -> RecallResult:
        with _without_statements():
            return await self._retriever.recall(*args, **kwargs)


def conversational(case: Case) -> tuple[str, tuple[str, ...]]:
    """The case's conversational query and its earlier lines (the form the bot asks with)."""
    for form, query in case.queries.items():
        if form in ("conversation", "topic change"):
            return query, tuple(case.earlier[form][-2:])
    raise ValueError(f"case {case.label} has no conversational form")


async def run(args: argparse.Namespace) -> None:
    print(f"== conversational recall latency ({machine_line()}), load {load_average()}")
    with bench_data_dir("fusion-latency") as data_dir:
        settings = MemorySettings(memory_data_dir=data_dir, embedding_query_deadline=120)
        tasks = [
            chitchat.task(),
            madial.topic_change_task(madial.load(madial_root(None), "zh"), settings.tz),
        ]
        memory = await open_memory(settings, maintenance_interval=None)
        try:
            first_id = 1
            shipped: Retriever = memory.parts.retriever  # a bench reads the parts
            configs: dict[str, Any] = {
                "shipped": shipped,
                "without statements first": WithoutStatements(shipped),
            }
            for number, task in enumerate(tasks, 1):
                base = number * USERS_PER_SET
                await store(memory, task, base, first_id)
                first_id += len(task.items)
                cases = task.cases[: args.cases]
                queries = [(base + c.user, *conversational(c), c.now) for c in cases]

                for user, query, earlier, now in queries:  # every text embedded once
                    options = RecallOptions(top_n=5, window_size=0, now=now, context=earlier)
                    await shipped.recall(user, query, options=options)
                calls = [
                    functools.partial(
                        _ask,
                        user,
                        query,
                        RecallOptions(top_n=5, window_size=0, now=now, context=earlier),
                    )
                    for user, query, earlier, now in queries
                ]
                times, cpu = await timed_rounds(configs, calls, args.rounds, data_dir)
                print(
                    f"\n{task.name}: {len(queries)} conversational queries × {args.rounds} "
                    f"rounds, hybrid, top 5, load {load_average()}"
                )
                print_recall_times(times, cpu)
        finally:
            await memory.aclose()


async def _ask(user: int, text: str, options: RecallOptions, retriever: Any) -> None:
    await retriever.recall(user, text, options=options)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
