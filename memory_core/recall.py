"""Ranking anchors and assembling their windows; pure functions, no I/O."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from .models import MemoryTurn, RecallResult, RecallWindow
from .store import AnchorCandidate


@dataclass(frozen=True)
class DecayPolicy:
    """Older turns weigh less: full weight up to ``after_days``, then an exponential fall with
    ``half_life_days`` towards ``min_weight`` (the weight multiplies the cosine similarity)."""

    after_days: float = 7.0
    half_life_days: float = 30.0
    min_weight: float = 0.9

    def weight(self, age_days: float) -> float:
        excess = age_days - self.after_days
        if excess <= 0:
            return 1.0
        return self.min_weight + (1.0 - self.min_weight) * math.pow(
            0.5, excess / self.half_life_days
        )


@dataclass(frozen=True)
class RankedAnchor:
    candidate: AnchorCandidate
    score: float


def rank_anchors(
    candidates: Sequence[AnchorCandidate],
    *,
    now: datetime,
    decay: DecayPolicy,
    top_n: int,
    similarity_floor: float | None = None,
) -> list[RankedAnchor]:
    """Apply the similarity floor and time decay, keep the best ``top_n`` (best first)."""
    ranked = []
    for candidate in candidates:
        if similarity_floor is not None and candidate.similarity < similarity_floor:
            continue
        age_days = max(0.0, (now - candidate.created_at).total_seconds() / 86400)
        ranked.append(RankedAnchor(candidate, candidate.similarity * decay.weight(age_days)))
    ranked.sort(key=lambda r: (-r.score, -r.candidate.created_at.timestamp(), -r.candidate.id))
    return ranked[:top_n]


def assemble_windows(
    query: str,
    anchors: Sequence[RankedAnchor],
    window_rows: Sequence[tuple[int, MemoryTurn]],
) -> RecallResult:
    """Group window rows by anchor, merge windows that share a turn, order everything.

    Windows come out in rank order (a merged window takes its best anchor's place and score);
    ``turns`` is every distinct turn in time order.
    """
    turns_by_anchor: dict[int, dict[int, MemoryTurn]] = {a.candidate.id: {} for a in anchors}
    for anchor_id, turn in window_rows:
        turns_by_anchor.setdefault(anchor_id, {})[turn.id] = turn

    merged: list[tuple[RankedAnchor, dict[int, MemoryTurn]]] = []
    for anchor in anchors:  # best first, so a merged group keeps its best anchor
        turns = dict(turns_by_anchor.get(anchor.candidate.id, {}))
        overlapping = [group for group in merged if group[1].keys() & turns.keys()]
        if not overlapping:
            merged.append((anchor, turns))
            continue
        keeper = overlapping[0]
        for other in overlapping[1:]:
            keeper[1].update(other[1])
            merged.remove(other)
        keeper[1].update(turns)

    def time_order(turn: MemoryTurn) -> tuple[datetime, int]:
        return (turn.created_at, turn.id)

    windows = tuple(
        RecallWindow(
            anchor_id=anchor.candidate.id,
            score=anchor.score,
            similarity=anchor.candidate.similarity,
            turns=tuple(sorted(turns.values(), key=time_order)),
        )
        for anchor, turns in merged
    )
    every_turn = {turn.id: turn for window in windows for turn in window.turns}
    return RecallResult(
        query=query, windows=windows, turns=tuple(sorted(every_turn.values(), key=time_order))
    )
