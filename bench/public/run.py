"""Recall quality on public, human-written conversation sets, through the bot's own recall.

Each set (see ``bench.public.madial`` and ``bench.public.chitchat``) is stored in a throwaway
embedded database through ``TemporalMemory`` with the shipped defaults and the local embedder,
then every case is recalled in its user's private session with ``top_n = k`` and window 0, for
every retrieval mode (``RecallOptions.mode``) and query form. Nothing here changes a default:
the figures are what a bot with ``MEMORY_TOP_N=k`` would recall. LoCoMo-dev
(``bench.public.locomo``) follows its own protocol instead: window ±2, one conversation a
session, a plain BM25 over the same turns beside (``bench.public.windows``).

    python -m bench.public                    # every set found
    python -m bench.public --sets zh --limit 20 --misses /tmp/misses.jsonl
    python -m bench.public --forms conversation --context-turns 2,4 --index-speaker
    python -m bench.public --sets locomo --set MEMORY_INDEX_SPEAKER=true
    python -m bench.public --outcomes /tmp/o.jsonl [--set KEY=VALUE]   # then:
    python -m bench.public.loso /tmp/o.jsonl                           # leave-one-set-out
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import numpy as np

from bench.common import (
    add_set_option,
    bench_data_dir,
    load_vector_cache,
    machine_line,
    quality_overrides,
    save_vector_cache,
    vector_cache_path,
)
from bench.public import chitchat, locomo, madial
from bench.public.outcomes import outcome, write_outcomes
from bench.public.scoring import (
    ALL_AT_K,
    AT_K,
    SEVERAL,
    Case,
    Task,
    chance_figures,
    format_table,
    hits,
)
from bench.public.windows import evaluate_windows
from memory_core import MemorySettings, RecallResult, TemporalMemory, TurnInput, open_memory
from memory_core.recall import retriever
from memory_core.recall.options import RecallOptions

Mode = Literal["vector", "keyword", "hybrid"]
MODES: tuple[Mode, ...] = ("vector", "keyword", "hybrid")
SETS = ("zh", "en", "chitchat", "locomo", "topic-zh", "topic-en")
REPO = Path(__file__).resolve().parents[2]
MADIAL_ENV = "TM_MADIAL_DIR"
DEFAULT_MADIAL = REPO.parent / "shared" / "data" / "madial-bench"
BOT_ID = 10_000
USERS_PER_SET = 100_000  # set number * this + the set's own user id: sets never share a user
VECTOR_CACHE = Path("/tmp/tm-bench-public-vectors")
EMBED_CHUNK = 256


def madial_root(flag: str | None) -> Path:
    """``--madial-dir``, else ``$TM_MADIAL_DIR``, else ``../shared/data/madial-bench``."""
    return Path(flag or os.environ.get(MADIAL_ENV) or DEFAULT_MADIAL)


def load_tasks(args: argparse.Namespace, settings: MemorySettings) -> list[Task]:
    """Every set asked for that can be read; a missing one is named and skipped."""
    tasks: list[Task] = []
    root = madial_root(args.madial_dir)
    for name in ("zh", "en"):
        wanted = [name in args.sets, f"topic-{name}" in args.sets]
        if not any(wanted):
            continue
        try:
            data = madial.load(root, name)
        except FileNotFoundError as exc:
            print(
                f"MADial-Bench {name}: skipped, {exc.filename} not found "
                f"(point --madial-dir or ${MADIAL_ENV} at the data set's folder)"
            )
            continue
        if wanted[0]:
            tasks.append(madial.task(data, settings.tz))
        if wanted[1]:
            tasks.append(madial.topic_change_task(data, settings.tz))
    if "chitchat" in args.sets:
        try:
            tasks.append(chitchat.task(people=args.chitchat_people))
        except chitchat.NotInstalledError as exc:
            print(f"Chit-Chat: skipped, {exc}")
    if "locomo" in args.sets:
        root = locomo.data_dir(args.locomo_dir)
        try:
            tasks.append(locomo.task(locomo.load(root, settings.tz)))
        except FileNotFoundError as exc:
            print(
                f"LoCoMo-dev: skipped, {exc.filename} not found "
                f"(point --locomo-dir or ${locomo.DIR_ENV} at the data set's folder)"
            )
    if args.limit:
        tasks = [_limited(t, args.limit) for t in tasks]
    return tasks


def _limited(task: Task, limit: int) -> Task:
    print(f"{task.name}: only its first {limit} of {len(task.cases)} cases (--limit)")
    return replace(task, cases=task.cases[:limit])


def ranked_units(result: RecallResult, units: dict[int, int]) -> list[int]:
    """The units of the anchors, in rank order (window 0: one turn a window)."""
    by_id = {t.id: t for t in result.turns}
    ranked = []
    for window in result.windows:
        turn = by_id[window.anchor_id]
        assert turn.message_id is not None
        ranked.append(units[turn.message_id])
    return ranked


async def store(memory: TemporalMemory, task: Task, base: int, first_id: int) -> dict[int, int]:
    """Insert the set's items (embedded by the memory's embedder, each by its indexed text in
    the memory's text form, with the line it answers if the form says so); message id ->
    unit."""
    turns = []
    units: dict[int, int] = {}
    for number, item in enumerate(task.items):
        message_id = first_id + number
        units[message_id] = item.unit
        turns.append(
            TurnInput(
                user_id=base + item.user,
                role=item.role,
                content=item.text,
                sender_name=item.speaker,
                message_id=message_id,
                created_at=item.created_at,
                self_id=BOT_ID,
            )
        )
    started = time.perf_counter()
    # Each turn's text as the memory embeds it (its text form, and the line it answers when
    # MEMORY_INDEX_CONTEXT puts that in the vector).
    indexed = [row.indexed for row in await memory.parts.writer.rows_for(turns)]
    vectors = await passage_vectors(memory, indexed)
    inserted = await memory.parts.writer.add_dialogues(turns, embeddings=vectors, batch_size=2000)
    print(f"stored {inserted} turns in {time.perf_counter() - started:.1f} s")
    return units


async def passage_vectors(memory: TemporalMemory, texts: Sequence[str]) -> np.ndarray:
    """The texts' passage embeddings by the memory's own embedder, kept between runs in a
    cache file by text (a cold run embeds ~6,600 texts: minutes on 2 busy cores)."""
    cache = vector_cache_path(VECTOR_CACHE, memory.parts.embedder.model, memory.parts.settings)
    known = load_vector_cache(cache)
    missing = sorted({t for t in texts if t not in known})
    if missing:
        started = time.perf_counter()
        for start in range(0, len(missing), EMBED_CHUNK):
            chunk = missing[start : start + EMBED_CHUNK]
            known.update(zip(chunk, await memory.parts.embedder.embed_passages(chunk), strict=True))
        save_vector_cache(cache, known)
        seconds = time.perf_counter() - started
        print(
            f"embedded {len(missing)} new texts with {memory.parts.embedder.model} "
            f"in {seconds:.1f} s "
            f"({len(missing) / seconds:.0f}/s)"
        )
    if len(missing) < len(set(texts)):
        print(f"{len(set(texts)) - len(missing)} distinct texts' vectors read from {cache}")
    return np.stack([known[t] for t in texts])


def expanded(case: Case, context_turns: Sequence[int]) -> list[tuple[str, str, list[str]]]:
    """The case's (form, query, earlier lines) to recall: a conversational form once for each
    count of earlier lines, named ``"conversation (N lines)"``."""
    found = []
    for form, query in case.queries.items():
        earlier = list(case.earlier.get(form, ()))
        if form not in case.earlier:
            found.append((form, query, earlier))
            continue
        for count in context_turns:
            found.append((f"{form} ({count} lines)", query, earlier[-count:] if count else []))
    return found


async def evaluate(
    memory: TemporalMemory,
    task: Task,
    base: int,
    units: dict[int, int],
    misses: list[dict[str, Any]] | None,
    time_aware: bool | None = None,
    later: timedelta = timedelta(0),
    forms: Sequence[str] | None = None,
    modes: Sequence[Mode] = MODES,
    context_turns: Sequence[int] = (),
    outcomes: list[dict[str, Any]] | None = None,
) -> None:
    """Recall every case in every mode and form at every k; print the set's table.
    ``outcomes`` gets one row a case, form, mode and k (``bench.public.outcomes``)."""
    found: dict[tuple[str, str], dict[str, list[bool]]] = defaultdict(lambda: defaultdict(list))
    timed: Counter[str] = Counter()
    texts: dict[int, list[str]] = defaultdict(list)
    for item in task.items:
        texts[item.unit].append(item.text)
    started = time.perf_counter()
    calls = 0
    for case in task.cases:
        user = base + case.user
        for form, query, earlier in expanded(case, context_turns):
            if forms and form.split(" (")[0] not in forms:
                continue
            for mode in modes:
                for k in AT_K:
                    result = await memory.parts.retriever.recall(
                        user,
                        query,
                        options=RecallOptions(
                            top_n=k,
                            window_size=0,
                            now=case.now + later,
                            mode=mode,
                            time_aware=time_aware,
                            context=tuple(earlier),
                        ),
                    )
                    calls += 1
                    assert all(t.user_id == user and t.group_id is None for t in result.turns)
                    ranked = ranked_units(result, units)
                    any_hit, all_hit = hits(ranked, case.relevant, k)
                    if outcomes is not None:
                        outcomes.append(outcome(task.name, case.label, form, mode, k, any_hit))
                    found[(form, mode)][f"any@{k}"].append(any_hit)
                    if k in ALL_AT_K:
                        found[(form, mode)][f"all@{k}"].append(all_hit)
                        if len(case.relevant) >= 2:
                            found[(form, mode)][f"{SEVERAL}@{k}"].append(all_hit)
                    # The search text ends with the query unless a time expression was cut.
                    if mode == "hybrid" and k == AT_K[0] and not result.search_text.endswith(query):
                        timed[form] += 1
                    if misses is not None and k == 5 and not any_hit:
                        misses.append(
                            {
                                "set": task.name,
                                "case": case.label,
                                "form": form,
                                "mode": mode,
                                "query": query,
                                "search_text": result.search_text,
                                "relevant": [texts[u][0][:200] for u in sorted(case.relevant)],
                                "recalled": [
                                    texts[u][0][:200] if len(texts[u]) == 1 else f"unit {u}"
                                    for u in ranked
                                ],
                            }
                        )
    elapsed = time.perf_counter() - started
    figures = {key: {c: sum(v) / len(v) for c, v in cols.items()} for key, cols in found.items()}
    rows = [(form, mode, values) for (form, mode), values in figures.items()]
    rows += [("published", label, dict(values)) for label, values in task.published.items()]
    rows.append(("random order", "chance", chance_figures(task)))
    print(f"\n#### {task.name}\n")
    print(task.about + ".")
    print("Query forms: " + "; ".join(f"*{f}*: {how}" for f, how in task.forms.items()) + ".")
    several = sum(len(case.relevant) >= 2 for case in task.cases)
    print(
        f"*{SEVERAL}@k*: every relevant memory among the first k, over the {several} of "
        f"{len(task.cases)} cases that need several (all evidence found)."
    )
    shown = list(dict.fromkeys(form for form, _ in figures))
    if task.published_note:
        print(task.published_note[0].upper() + task.published_note[1:] + ".")
    print()
    print(format_table(rows))
    print()
    for form in shown:
        if (form, "hybrid") not in figures or (form, "vector") not in figures:
            continue
        best = max(("vector", "keyword"), key=lambda m: figures[(form, m)]["any@5"])
        gap = figures[(form, "hybrid")]["any@5"] - figures[(form, best)]["any@5"]
        print(
            f"{form}: best single channel by any@5 is {best}; hybrid {gap:+.3f} against it "
            f"({'≥' if gap >= 0 else '<'} best single). Time words understood in "
            f"{timed[form]} of {len(task.cases)} queries."
        )
    print(
        f"{calls} recalls in {elapsed:.1f} s ({elapsed / max(calls, 1) * 1000:.1f} ms each, "
        "query embedding included, repeated queries served by the embedding cache)"
    )


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run every set; returns the misses at k=5 (empty unless ``--misses``)."""
    started = time.perf_counter()
    print(f"== public recall bench ({machine_line()})")
    if args.index_speaker is not None:
        print(f"MEMORY_INDEX_SPEAKER={str(args.index_speaker).lower()} (--index-speaker)")
    if args.context_turns:
        turns = ", ".join(map(str, args.context_turns))
        print(f"conversation form with the last {turns} earlier lines (--context-turns)")
    if args.time_aware is False:
        print("time words in queries ignored (--no-time-words; not the shipped default)")
    if args.later_days:
        print(f"every recall {args.later_days} days after its case's moment (--later-days)")
    if args.decay_floor is not None:
        print(f"decay floor {args.decay_floor:g} (--decay-floor; not the default 0.97)")
    overrides: dict[str, Any] = quality_overrides(args.set)
    for key, value in overrides.items():
        print(f"{key.upper()}={value} (--set; not the shipped default)")
    with bench_data_dir("public") as data_dir:
        if args.decay_floor is not None:
            retriever.DECAY = dataclasses.replace(retriever.DECAY, min_weight=args.decay_floor)
        if args.index_speaker is not None:
            overrides["memory_index_speaker"] = args.index_speaker
        if args.context_turns:
            # The bench passes each form's last N lines itself; recall must keep them all.
            overrides["memory_query_context_turns"] = max(args.context_turns)
        # The shipped defaults, but for a --decay-floor being compared.
        settings = MemorySettings(memory_data_dir=data_dir, **overrides)
        tasks = load_tasks(args, settings)
        if not tasks:
            print("no set to run")
            return []
        memory = await open_memory(settings, maintenance_interval=None)
        misses: list[dict[str, Any]] | None = [] if args.misses else None
        outcomes: list[dict[str, Any]] | None = [] if args.outcomes else None
        try:
            first_id = 1
            for number, task in enumerate(tasks, 1):
                print(f"\n--- {task.name}")
                base = number * USERS_PER_SET
                units = await store(memory, task, base, first_id)
                first_id += len(task.items)
                later = timedelta(days=args.later_days)
                if task.window:
                    await evaluate_windows(
                        memory,
                        task,
                        base,
                        units,
                        args.modes,
                        misses,
                        args.time_aware,
                        later,
                        outcomes,
                    )
                    continue
                await evaluate(
                    memory,
                    task,
                    base,
                    units,
                    misses,
                    args.time_aware,
                    later,
                    args.forms,
                    args.modes,
                    args.context_turns or [memory.parts.settings.memory_query_context_turns],
                    outcomes,
                )
        finally:
            await memory.aclose()
        if outcomes is not None:
            label = args.label or ",".join(args.set or []) or "shipped"
            write_outcomes(Path(args.outcomes), label, outcomes)
    print(f"\nwhole run: {time.perf_counter() - started:.0f} s")
    return misses or []


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sets",
        type=lambda text: [s for s in text.split(",") if s],
        default=list(SETS),
        help=f"comma-separated, of {', '.join(SETS)} (default: all)",
    )
    parser.add_argument(
        "--madial-dir",
        help=f"MADial-Bench folder (default: ${MADIAL_ENV}, else {DEFAULT_MADIAL})",
    )
    parser.add_argument(
        "--locomo-dir",
        help=f"LoCoMo-dev folder (default: ${locomo.DIR_ENV}, else {locomo.DEFAULT_DIR})",
    )
    parser.add_argument(
        "--chitchat-people",
        type=int,
        default=chitchat.DEFAULT_PEOPLE,
        help="how many Chit-Chat people's histories to use",
    )
    parser.add_argument("--limit", type=int, default=None, help="only the first N cases a set")
    parser.add_argument(
        "--modes",
        type=lambda text: [m for m in text.split(",") if m],
        default=list(MODES),
        help="comma-separated retrieval modes to run (default: all three)",
    )
    parser.add_argument("--misses", help="write every miss at k=5 to this JSON-lines file")
    parser.add_argument(
        "--outcomes",
        help="append every case's hit or miss at each k to this JSON-lines file "
        "(read by `python -m bench.public.loso`)",
    )
    parser.add_argument(
        "--label",
        help="the configuration's name in --outcomes (default: the --set values, or shipped)",
    )
    parser.add_argument(
        "--no-time-words",
        dest="time_aware",
        action="store_const",
        const=False,
        default=None,
        help="diagnosis: recall with time_aware=False (time words not read)",
    )
    parser.add_argument(
        "--decay-floor",
        type=float,
        default=None,
        help="compare a decay floor (1 = no time decay) with the shipped 0.97",
    )
    add_set_option(parser)
    parser.add_argument(
        "--later-days",
        type=float,
        default=0.0,
        help="diagnosis: recall this many days later (7300: every memory at the decay floor)",
    )
    parser.add_argument(
        "--index-speaker",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compare MEMORY_INDEX_SPEAKER (passages embedded and keyworded as `Name: text`)",
    )
    parser.add_argument(
        "--context-turns",
        type=lambda text: [int(n) for n in text.split(",") if n],
        default=None,
        help="the conversation form with each of these MEMORY_QUERY_CONTEXT_TURNS, e.g. 2,4",
    )
    parser.add_argument(
        "--forms",
        type=lambda text: [f.strip() for f in text.split(",") if f.strip()],
        default=None,
        help="only these query forms (comma-separated, e.g. 'last user line,conversation')",
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.sets) - set(SETS)) + sorted(set(args.modes) - set(MODES))
    if unknown:
        parser.error(f"unknown sets or modes {unknown}; sets: {', '.join(SETS)}")
    misses = asyncio.run(run(args))
    if args.misses:
        lines = [json.dumps(miss, ensure_ascii=False) + "\n" for miss in misses]
        Path(args.misses).write_text("".join(lines), encoding="utf-8")
        print(f"{len(misses)} misses at k=5 written to {args.misses}")
