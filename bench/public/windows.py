"""Scoring with windows: a set whose hit counts the anchors' neighbouring turns (LoCoMo).

The bot is asked with ``top_n = k`` and ``window_size = task.window`` (its own windows, as the
prompt would get them); a case is a hit @k when a relevant turn is in any of the k windows.
Beside it, a plain BM25 (``bench.public.bm25``) over the same user's turns, its k best turns
widened by the same ±window positions in the conversation, so both read the same rule.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from bench.public.bm25 import BM25
from bench.public.outcomes import outcome
from bench.public.scoring import SEVERAL, Case, Item, Task, format_table
from memory_core import RecallResult, TemporalMemory
from memory_core.models import RecallWindow
from memory_core.recall.options import RecallOptions
from memory_core.settings import RetrievalMode

AT_K = (1, 5, 10)
BM25_CHANNEL = "plain BM25"
Figures = dict[str, list[bool]]


def window_units(result: RecallResult, units: dict[int, int]) -> set[int]:
    """The units of every turn in the result's windows (anchors and their neighbours)."""
    found = set()
    for window in result.windows:
        for turn in window.turns:
            assert turn.message_id is not None
            found.add(units[turn.message_id])
    return found


def widened(order: Sequence[int], size: int, window: int) -> set[int]:
    """Positions ``order`` ±window, within 0..size-1."""
    return {p for a in order for p in range(a - window, a + window + 1) if 0 <= p < size}


def score(found: Figures, case: Case, k: int, seen: set[int]) -> None:
    """Record case's any@k / all@k (and ≥2 all@k) for the units ``seen``."""
    found[f"any@{k}"].append(bool(case.relevant & seen))
    if k in (5, 10):
        every = case.relevant <= seen
        found[f"all@{k}"].append(every)
        if len(case.relevant) >= 2:
            found[f"{SEVERAL}@{k}"].append(every)


def bm25_figures(task: Task) -> dict[str, Figures]:
    """Per case label, BM25's any/all@k over the case's user's turns said before it."""
    by_user: dict[int, list[Item]] = defaultdict(list)
    for item in task.items:
        by_user[item.user].append(item)
    indexes: dict[tuple[int, int], BM25] = {}  # (user, turns visible) -> their index
    out: dict[str, Figures] = {}
    for case in task.cases:
        turns = [i for i in by_user[case.user] if i.created_at <= case.now]
        key = (case.user, len(turns))
        if key not in indexes:
            indexes[key] = BM25([i.text for i in turns])
        ranked = indexes[key].ranked(next(iter(case.queries.values())))
        found: Figures = defaultdict(list)
        for k in AT_K:
            seen = widened(ranked[:k], len(turns), task.window)
            score(found, case, k, {turns[p].unit for p in seen})
        out[case.label] = found
    return out


async def evaluate_windows(
    memory: TemporalMemory,
    task: Task,
    base: int,
    units: dict[int, int],
    modes: Sequence[RetrievalMode],
    misses: list[dict[str, Any]] | None,
    time_aware: bool | None = None,
    later: timedelta = timedelta(0),
    outcomes: list[dict[str, Any]] | None = None,
) -> None:
    """Recall every case in every mode at every k with the task's window; print the table,
    whole set then each group, with plain BM25 beside. ``outcomes`` gets one row a case,
    mode and k (``bench.public.outcomes``)."""
    per_case: dict[tuple[str, str], Figures] = {}
    texts = {item.unit: item.text for item in task.items}
    started = time.perf_counter()
    calls = 0
    for case in task.cases:
        query = next(iter(case.queries.values()))
        for mode in modes:
            found: Figures = defaultdict(list)
            for k in AT_K:
                result = await memory.parts.retriever.recall(
                    base + case.user,
                    query,
                    options=RecallOptions(
                        top_n=k,
                        window_size=task.window,
                        now=case.now + later,
                        mode=mode,
                        time_aware=time_aware,
                    ),
                )
                calls += 1
                seen = window_units(result, units)
                score(found, case, k, seen)
                if outcomes is not None:
                    hit = bool(case.relevant & seen)
                    outcomes.append(outcome(task.name, case.label, "question", mode, k, hit))
                if misses is not None and k == 5 and not case.relevant & seen:
                    anchors = [_anchor_unit(w, units) for w in result.windows]
                    misses.append(
                        {
                            "set": task.name,
                            "case": case.label,
                            "mode": mode,
                            "query": query,
                            "search_text": result.search_text,
                            "relevant": [texts[u][:200] for u in sorted(case.relevant)],
                            "recalled": [texts[u][:200] for u in anchors],
                        }
                    )
            per_case[(case.label, mode)] = found
    elapsed = time.perf_counter() - started
    for label, found in bm25_figures(task).items():
        per_case[(label, BM25_CHANNEL)] = found
    report(task, per_case, modes, calls, elapsed)


def report(
    task: Task,
    per_case: dict[tuple[str, str], Figures],
    modes: Sequence[str],
    calls: int,
    elapsed: float,
) -> None:
    """Print the set's table (whole set, then each group; every mode, then plain BM25) and
    how hybrid and each mode stand against the best single channel and BM25."""
    channels = [*modes, BM25_CHANNEL]
    groups = [("all questions", [c.label for c in task.cases])]
    for name in sorted({task.groups[c.label] for c in task.cases if c.label in task.groups}):
        groups.append(
            (f"category {name}", [c.label for c in task.cases if task.groups.get(c.label) == name])
        )
    rows = []
    for name, labels in groups:
        for channel in channels:
            rows.append(
                (
                    f"{name} ({len(labels)})",
                    channel,
                    _means([per_case[(x, channel)] for x in labels]),
                )
            )
    print(f"\n#### {task.name}\n")
    print(task.about + ".")
    print("Query forms: " + "; ".join(f"*{f}*: {how}" for f, how in task.forms.items()) + ".")
    several = sum(len(case.relevant) >= 2 for case in task.cases)
    print(
        f"*{SEVERAL}@k*: every evidence turn within the k windows, over the {several} of "
        f"{len(task.cases)} questions with several. any@3 not run (the protocol reads @1/@5/@10)."
    )
    if task.published_note:
        print(task.published_note[0].upper() + task.published_note[1:] + ".")
    print()
    print(format_table(rows))
    print()
    whole = {channel: rows[i][2] for i, channel in enumerate(channels)}
    singles = [m for m in ("vector", "keyword") if m in whole]
    if "hybrid" in whole and singles:
        best = max(singles, key=lambda m: whole[m]["any@5"])
        gap = whole["hybrid"]["any@5"] - whole[best]["any@5"]
        print(f"best single channel by any@5 is {best}; hybrid {gap:+.3f} against it.")
    for mode in modes:
        gap = whole[mode]["any@5"] - whole[BM25_CHANNEL]["any@5"]
        print(f"{mode} any@5 {gap:+.3f} against plain BM25.")
    print(
        f"{calls} recalls in {elapsed:.1f} s ({elapsed / max(calls, 1) * 1000:.1f} ms each, "
        "query embedding included, repeated queries served by the embedding cache)"
    )


def _anchor_unit(window: RecallWindow, units: dict[int, int]) -> int:
    anchor = next(t for t in window.turns if t.id == window.anchor_id)
    assert anchor.message_id is not None
    return units[anchor.message_id]


def _means(cases: Sequence[Figures]) -> dict[str, float]:
    keys = {key for found in cases for key in found}
    out = {}
    for key in keys:
        values = [v for found in cases for v in found.get(key, [])]
        out[key] = sum(values) / len(values) if values else float("nan")
    return out
