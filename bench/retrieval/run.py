"""Retrieval quality on the generated benchmark, with the real local embedder.

Every question is asked in its own session scope, as the bot would; a context is the turns
recall returns, cut to a budget of B turns in rank order (windows in rank order, each window's
anchor first and then its neighbours by distance). All channels get the same budget, so
"with windows" spends part of it on neighbours instead of more anchors.

Figures: evidence Recall@B (any / all evidence turns inside the context), NDCG@B (binary
relevance), and the latency of the recall call (embedding the query included).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.common import (
    add_set_option,
    bench_data_dir,
    load_vector_cache,
    machine_line,
    percentiles,
    quality_overrides,
    save_vector_cache,
    vector_cache_path,
)
from bench.retrieval.generate import NOW, Dataset, Question, Turn, build
from memory_core import TemporalMemory, open_memory
from memory_core.models import RecallResult, TurnInput
from memory_core.providers.embedding import build_embedder
from memory_core.recall import retriever
from memory_core.recall.options import RecallOptions
from memory_core.settings import MemorySettings

BUDGETS = (5, 15)
MODES = ("keyword", "vector", "hybrid")
WINDOWS = (0, 2)
VECTOR_CACHE = Path("/tmp/tm-bench-retrieval-vectors")
DEFAULT_DECAY = retriever.DECAY  # the shipped decay (retriever.DECAY)


@dataclass(frozen=True)
class Config:
    mode: str
    window: int
    time_aware: bool = True
    decay_floor: float | None = None  # None: the shipped retriever.DECAY

    @property
    def label(self) -> str:
        parts = [self.mode, f"window {self.window}"]
        if not self.time_aware:
            parts.append("no time")
        if self.decay_floor == 1.0:
            parts.append("no time decay")
        elif self.decay_floor is not None:
            parts.append(f"decay floor {self.decay_floor:g}")
        return ", ".join(parts)


@dataclass
class Scores:
    any_hit: float
    all_hit: float
    ndcg: float


def context(result: RecallResult, budget: int) -> list[int]:
    """The turn ids of ``result`` in rank order, at most ``budget``."""
    ordered: list[int] = []
    for window in result.windows:
        ids = [t.id for t in window.turns]
        anchor = ids.index(window.anchor_id) if window.anchor_id in ids else 0
        for turn_id in sorted(ids, key=lambda i: abs(ids.index(i) - anchor)):
            if turn_id not in ordered:
                ordered.append(turn_id)
    return ordered[:budget]


def score(ranked: Sequence[int], evidence: set[int]) -> Scores:
    found = [1.0 if turn_id in evidence else 0.0 for turn_id in ranked]
    dcg = sum(rel / math.log2(rank + 2) for rank, rel in enumerate(found))
    ideal = sum(1 / math.log2(rank + 2) for rank in range(min(len(evidence), len(ranked) or 1)))
    return Scores(
        any_hit=float(any(found)),
        all_hit=float(evidence <= set(ranked)),
        ndcg=dcg / ideal if ideal else 0.0,
    )


# Names as the bot stores them: the sender's nickname, the bot's own name on its replies.
NICKNAMES = ("小明", "阿杰", "Lily", "老王", "星星", "Tom", "小雨", "大熊", "Anna", "阿May")
BOT_NAME = "小诗"


def speaker(turn: Turn) -> str:
    return BOT_NAME if turn.role == "assistant" else NICKNAMES[turn.user_id % len(NICKNAMES)]


async def load(memory: TemporalMemory, data: Dataset) -> dict[str, int]:
    """Insert the turns, embedded by the real model (vectors cached by text between runs) from
    their indexed text in the memory's text form; returns uuid -> row id."""
    names = [speaker(t) for t in data.turns]
    turns = [
        TurnInput(
            user_id=t.user_id,
            group_id=t.group_id,
            role=t.role,  # type: ignore[arg-type]
            content=t.content,
            sender_name=name,
            created_at=t.created_at,
            message_uuid=t.key,
            self_id=10_000,
        )
        for t, name in zip(data.turns, names, strict=True)
    ]
    # Each turn as the memory embeds it (its text form, with its line under MEMORY_INDEX_CONTEXT).
    texts = [row.indexed for row in await memory.parts.writer.rows_for(turns)]
    cache = vector_cache_path(VECTOR_CACHE, memory.parts.embedder.model, memory.parts.settings)
    known = load_vector_cache(cache)
    missing = sorted({t for t in texts if t not in known})
    started = time.perf_counter()
    if missing:
        fresh = await memory.parts.embedder.embed_passages(missing)
        known.update(zip(missing, fresh, strict=True))
        save_vector_cache(cache, known)
    embed_seconds = time.perf_counter() - started
    vectors = np.stack([known[t] for t in texts])
    print(
        f"embedded {len(missing)} distinct new texts with {memory.parts.embedder.model} in "
        f"{embed_seconds:.1f} s ({embed_seconds / max(len(missing), 1) * 1000:.1f} ms each; "
        f"{len(set(texts)) - len(missing)} from {cache})"
    )
    started = time.perf_counter()
    await memory.parts.writer.add_dialogues(turns, embeddings=vectors, batch_size=2000)
    print(f"inserted {len(turns)} turns in {time.perf_counter() - started:.1f} s")
    async with (
        memory.parts.database.pool.acquire() as conn
    ):  # bench-only: map the labels to row ids
        await conn.execute("VACUUM ANALYZE dialogues")
        rows = await conn.fetch("SELECT id, message_uuid FROM dialogues")
        sizes = await conn.fetchrow(
            "SELECT pg_relation_size('dialogues_keywords') AS gin, count(*) AS n, "
            "avg(pg_column_size(keywords)) AS col FROM dialogues"
        )
    assert sizes is not None
    print(
        f"keyword channel: GIN index {sizes['gin'] / sizes['n']:.0f} bytes/row, tsvector column "
        f"{float(sizes['col']):.0f} bytes/row on average"
    )
    return {r["message_uuid"]: r["id"] for r in rows}


async def evaluate(
    memory: TemporalMemory,
    questions: Sequence[Question],
    ids: dict[str, int],
    config: Config,
    budget: int,
) -> tuple[dict[str, list[Scores]], list[float]]:
    # bench-only: swap the decay policy (a floor of 1 turns it off)
    memory.parts.retriever._decay = (
        DEFAULT_DECAY
        if config.decay_floor is None
        else dataclasses.replace(DEFAULT_DECAY, min_weight=config.decay_floor)
    )
    by_category: dict[str, list[Scores]] = defaultdict(list)
    latencies = []
    for q in questions:
        started = time.perf_counter()
        result = await memory.parts.retriever.recall(
            q.user_id,
            q.text,
            q.group_id,
            RecallOptions(
                top_n=budget,
                window_size=config.window,
                now=NOW,
                mode=config.mode,  # type: ignore[arg-type]
                time_aware=config.time_aware,
            ),
        )
        latencies.append((time.perf_counter() - started) * 1000)
        assert all(t.user_id == q.user_id and t.group_id == q.group_id for t in result.turns)
        s = score(context(result, budget), {ids[key] for key in q.evidence})
        by_category[q.category].append(s)
        by_category["all"].append(s)
    return by_category, latencies


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


async def default_latency(memory: TemporalMemory, questions: Sequence[Question]) -> None:
    """Latency at the shipped defaults (top_n=3, window=2) for each mode."""
    print("\nrecall latency at the defaults (top_n 3, window 2), ms, query embedding included:")
    print("| mode | p50 | p95 |\n|---|---|---|")
    memory.parts.retriever._decay = DEFAULT_DECAY
    for mode, time_aware in (
        ("vector", False),
        ("keyword", True),
        ("vector", True),
        ("hybrid", True),
    ):
        samples = []
        for q in questions:
            started = time.perf_counter()
            await memory.parts.retriever.recall(
                q.user_id,
                q.text,
                q.group_id,
                RecallOptions(
                    top_n=3,
                    window_size=2,
                    now=NOW,
                    mode=mode,  # type: ignore[arg-type]
                    time_aware=time_aware,
                ),
            )
            samples.append((time.perf_counter() - started) * 1000)
        p = percentiles(samples)
        label = mode + ("" if time_aware else " (no time: recall without the time channel)")
        print(f"| {label} | {p['p50']:.1f} | {p['p95']:.1f} |")


async def run(
    limit: int | None,
    decay_floors: Sequence[float] = (),
    overrides: dict[str, str] | None = None,
    index_speaker: bool = False,
) -> None:
    global DEFAULT_DECAY
    overrides = overrides or {}
    for key, value in overrides.items():
        print(f"{key.upper()}={value} (--set; not the shipped default)")
    data = build()
    questions = data.questions[:limit] if limit else data.questions
    print(f"== retrieval bench ({machine_line()})")
    print(
        f"{len(data.turns)} turns in {data.sessions} sessions; {len(questions)} questions "
        f"({', '.join(f'{c} {n}' for c, n in _counts(questions).items())})"
    )
    with bench_data_dir("retrieval") as data_dir:
        settings = MemorySettings.model_validate(
            {
                "memory_data_dir": data_dir,
                "embedding_cache_size": 0,
                "memory_index_speaker": index_speaker,
                **overrides,
            }
        )
        print(f"MEMORY_INDEX_SPEAKER={str(settings.memory_index_speaker).lower()}")
        DEFAULT_DECAY = retriever.DECAY
        started = time.perf_counter()
        embedder = await build_embedder(settings)
        print(f"local embedder loaded in {time.perf_counter() - started:.2f} s")
        memory = await open_memory(settings, embedder=embedder, maintenance_interval=None)
        try:
            ids = await load(memory, data)
            await evaluate(memory, questions[:30], ids, Config("hybrid", 2), 15)  # warm-up
            header = (
                "| channels | "
                + " | ".join(f"R@{b} any | R@{b} all | NDCG@{b}" for b in BUDGETS)
                + " | p50 ms | p95 ms |"
            )
            print("\nall questions; budget B = turns returned (same for every row)")
            print(header)
            print("|" + "---|" * (2 + 3 * len(BUDGETS) + 1))
            per_category: dict[tuple[str, int], dict[str, list[Scores]]] = {}
            configs = [Config(m, w) for w in WINDOWS for m in MODES]
            configs.append(Config("hybrid", 2, decay_floor=1.0))
            configs.append(Config("vector", 2, decay_floor=1.0))
            configs.append(Config("vector", 2, time_aware=False))
            if decay_floors:  # only the decay comparison
                configs = [
                    Config(m, w, decay_floor=f)
                    for f in decay_floors
                    for w in WINDOWS
                    for m in ("vector", "hybrid")
                ]
            for config in configs:
                cells = []
                latency: list[float] = []
                for budget in BUDGETS:
                    result, samples = await evaluate(memory, questions, ids, config, budget)
                    per_category[(config.label, budget)] = result
                    overall = result["all"]
                    cells.append(
                        f"{mean([s.any_hit for s in overall]):.3f} | "
                        f"{mean([s.all_hit for s in overall]):.3f} | "
                        f"{mean([s.ndcg for s in overall]):.3f}"
                    )
                    latency = samples  # report the largest budget's
                p = percentiles(latency)
                print(
                    f"| {config.label} | "
                    + " | ".join(cells)
                    + f" | {p['p50']:.1f} | {p['p95']:.1f} |"
                )

            budget = BUDGETS[-1]
            categories = sorted({q.category for q in questions})
            print(f"\nby category, R@{budget} all (any) — every evidence turn inside the context")
            print("| channels | " + " | ".join(categories) + " |")
            print("|" + "---|" * (len(categories) + 1))
            for config in configs:
                result = per_category[(config.label, budget)]
                print(
                    f"| {config.label} | "
                    + " | ".join(
                        f"{mean([s.all_hit for s in result[c]]):.3f} "
                        f"({mean([s.any_hit for s in result[c]]):.3f})"
                        for c in categories
                    )
                    + " |"
                )

            if decay_floors:
                return
            timed = [q for q in questions if q.category == "time"]
            print(f"\ntime questions ({len(timed)}): with and without time-range understanding")
            print("| channels | " + " | ".join(f"R@{b} any | NDCG@{b}" for b in BUDGETS) + " |")
            print("|" + "---|" * (1 + 2 * len(BUDGETS)))
            for mode in MODES:
                for window in WINDOWS:
                    for time_aware in (False, True):
                        config = Config(mode, window, time_aware=time_aware)
                        cells = []
                        for b in BUDGETS:
                            result, _ = await evaluate(memory, timed, ids, config, b)
                            cells.append(
                                f"{mean([s.any_hit for s in result['all']]):.3f} | "
                                f"{mean([s.ndcg for s in result['all']]):.3f}"
                            )
                        print(f"| {config.label} | " + " | ".join(cells) + " |")
            await default_latency(memory, questions)
        finally:
            await memory.aclose()


def _counts(questions: Sequence[Question]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for q in questions:
        counts[q.category] += 1
    return dict(counts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=None, help="ask only the first N questions")
    parser.add_argument(
        "--decay-floors",
        type=lambda text: [float(x) for x in text.split(",")],
        default=[],
        help="only compare these decay floors (retriever.DECAY), e.g. 0.9,0.97,1",
    )
    add_set_option(parser)
    parser.add_argument(
        "--index-speaker",
        action="store_true",
        help="store with MEMORY_INDEX_SPEAKER on (turns indexed as `name: content`)",
    )
    args = parser.parse_args(argv)
    asyncio.run(run(args.limit, args.decay_floors, quality_overrides(args.set), args.index_speaker))


if __name__ == "__main__":
    main()
