"""What every public set becomes before it is run, and how a ranking is scored.

A set is a list of items to store (each one turn of one user, with its time and the *unit*
it belongs to: a memory id, a conversation) and a list of cases (a user, a moment, queries in
one or more forms, and the units that count as found). Recall returns turns; the runner maps
each turn back to its unit. A case is a hit @k when a relevant unit is among the first k
turns returned ("any"), or when every relevant unit is ("all").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

Role = Literal["user", "assistant"]
AT_K = (1, 3, 5, 10)
ALL_AT_K = (5, 10)
# "All evidence found" among the cases that need several memories (two or more relevant
# units): all@k over every case mixes them with cases where all@k is any@k.
SEVERAL = "≥2 all"
COLUMNS = (
    tuple(f"any@{k}" for k in AT_K)
    + tuple(f"all@{k}" for k in ALL_AT_K)
    + tuple(f"{SEVERAL}@{k}" for k in ALL_AT_K)
)


@dataclass(frozen=True)
class Item:
    """One turn to store in ``user``'s private session."""

    user: int
    role: Role
    text: str
    created_at: datetime
    unit: int
    speaker: str | None = None


@dataclass(frozen=True)
class Case:
    """One recall: ``queries`` maps a query form to its text; ``now`` is the recall's time;
    ``earlier`` maps a conversational form to the lines said before its text (oldest first),
    passed to recall as the conversation (``context``)."""

    label: str
    user: int
    now: datetime
    queries: Mapping[str, str]
    relevant: frozenset[int]
    earlier: Mapping[str, Sequence[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    name: str
    about: str  # one line: what is stored, what is asked, what counts
    items: Sequence[Item]
    cases: Sequence[Case]
    forms: Mapping[str, str]  # query form -> how it is built, for the table
    # label -> figures (COLUMNS keys; a missing key prints as "–") of published systems
    published: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    published_note: str = ""
    # A hit counts the anchors' ±window neighbouring turns too (0: the anchors alone), each
    # item then being its own unit, numbered in conversation order (neighbours are unit ± d).
    window: int = 0
    # case label -> the group it is reported in besides the whole set (e.g. a category)
    groups: Mapping[str, str] = field(default_factory=dict)


def hits(ranked_units: Sequence[int], relevant: frozenset[int], k: int) -> tuple[bool, bool]:
    """(any relevant unit in the first k, every relevant unit in the first k)."""
    top = ranked_units[:k]
    return any(u in relevant for u in top), relevant <= set(top)


def figures_from_rankings(
    rankings: Mapping[int, Sequence[int]], relevant: Mapping[int, frozenset[int]]
) -> dict[str, float]:
    """Any@k / all@k of fixed rankings (``case id -> ranked units``) over the cases given."""
    out: dict[str, float] = {}
    cases = [c for c in relevant if c in rankings]
    for k in AT_K:
        out[f"any@{k}"] = _mean([hits(rankings[c], relevant[c], k)[0] for c in cases])
    for k in ALL_AT_K:
        out[f"all@{k}"] = _mean([hits(rankings[c], relevant[c], k)[1] for c in cases])
    return out


def chance(pool: int, relevant: int, k: int) -> float:
    """Probability that k turns drawn at random from ``pool`` include a relevant one."""
    if relevant <= 0 or pool <= 0:
        return 0.0
    k = min(k, pool)
    return 1.0 - math.comb(pool - relevant, k) / math.comb(pool, k)


def chance_figures(task: Task) -> dict[str, float]:
    """Any@k of a random order of each case's visible turns (the floor of the task)."""
    pools: list[tuple[int, int]] = []
    for case in task.cases:
        visible = [i for i in task.items if i.user == case.user and i.created_at <= case.now]
        pools.append((len(visible), sum(i.unit in case.relevant for i in visible)))
    return {f"any@{k}": _mean([chance(n, r, k) for n, r in pools]) for k in AT_K}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def format_table(rows: Sequence[tuple[str, str, Mapping[str, float]]]) -> str:
    """A markdown table: query form, channel, then every column of COLUMNS."""
    lines = [
        "| query | channel | " + " | ".join(COLUMNS) + " |",
        "|---|---|" + "---|" * len(COLUMNS),
    ]
    for form, channel, values in rows:
        cells = [f"{values[c]:.3f}" if c in values else "–" for c in COLUMNS]
        lines.append(f"| {form} | {channel} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
