"""Ranking anchors and assembling their windows; pure functions, no I/O."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from ..dialogue.recall_store import AnchorCandidate
from ..models import MemoryTurn, RecallResult, RecallWindow


@dataclass(frozen=True)
class DecayPolicy:
    """Older turns weigh less: full weight up to ``after_days``, then an exponential fall with
    ``half_life_days`` towards ``min_weight`` (the weight multiplies the cosine similarity)."""

    after_days: float = 7.0
    half_life_days: float = 30.0
    min_weight: float = 0.97

    def weight(self, age_days: float) -> float:
        excess = age_days - self.after_days
        if excess <= 0:
            return 1.0
        return self.min_weight + (1.0 - self.min_weight) * math.pow(
            0.5, excess / self.half_life_days
        )

    def weight_at(self, created_at: datetime, now: datetime) -> float:
        """The weight of a turn said at ``created_at``, seen at ``now``."""
        return self.weight(max(0.0, (now - created_at).total_seconds() / 86400))


NO_DECAY = DecayPolicy(min_weight=1.0)


def decay_for_match(
    decay: DecayPolicy, similarities: Sequence[float], tie_margin: float | None
) -> DecayPolicy:
    """``decay`` when the best two similarities are within ``tie_margin`` (meaning alone cannot
    tell them apart, and the newer may win), else no decay: a clearly best match is not pushed
    down for being old (a memory archive, unlike a chat, is not better for being recent).
    ``tie_margin=None``: always ``decay``."""
    if tie_margin is None or len(similarities) < 2:
        return decay
    first, second = sorted(similarities, reverse=True)[:2]
    return decay if first - second < tie_margin else NO_DECAY


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
) -> list[RankedAnchor]:
    """Apply time decay, keep the best ``top_n`` (best first)."""
    ranked = []
    for candidate in candidates:
        weight = decay.weight_at(candidate.created_at, now)
        ranked.append(RankedAnchor(candidate, candidate.similarity * weight))
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


@dataclass(frozen=True)
class Channel:
    """One ranked candidate list (best first) and its weight in the fusion."""

    name: str
    candidates: Sequence[AnchorCandidate]
    weight: float = 1.0
    # Optional per-candidate strength in [0, 1] (e.g. how much of the query a keyword hit
    # matches): scales that candidate's contribution, so a channel that only matched filler
    # words cannot outvote the others.
    strengths: Mapping[int, float] | None = None


# How far the keyword channel's best score must stand above its second for the channel to
# count in full under the ``confident`` recipe (1.25: a quarter higher). Chosen on half of
# the public sets' cases, see bench/RESULTS.md.
CLEAR_LEAD = 1.25


def keyword_confidence(scores: Sequence[float]) -> float:
    """How clearly a keyword list's best hit stands out, 0-1: 0 when the two best scores tie
    (the terms matched are common, the list adds noise), 1 from a lead of ``CLEAR_LEAD``."""
    if not scores:
        return 0.0
    first, *rest = sorted(scores, reverse=True)
    if not rest or rest[0] <= 0:
        return 1.0
    return min(1.0, max(0.0, (first / rest[0] - 1.0) / (CLEAR_LEAD - 1.0)))


# Under the ``rarity`` recipe the keyword list counts not at all while the query's rarest
# found terms are this common in the session (rarity 0.7: each in about N^0.3 of its N turns,
# e.g. 8 of 1,000), and in full from rarity 1 (a term in one turn only). Chosen on half of the
# public sets' cases, see bench/RESULTS.md.
RARITY_NONE = 0.7
RARITY_FULL = 1.0


def keyword_rarity_weight(rarity: float) -> float:
    """How much a keyword list counts beside the vector list, 0-1, by how rare in the session
    the query's rarest found terms are: words found all over a chatty session ("今天", "好吃")
    match many turns by chance and carry no evidence of which one is meant."""
    return min(1.0, max(0.0, (rarity - RARITY_NONE) / (RARITY_FULL - RARITY_NONE)))


# Under the ``gated`` recipe a keyword hit whose cosine to the query is this far below the
# vector list's best counts ``FAR_HIT_SHARE`` of its strength (in full when level with it,
# linearly between), unless the query's terms are rare in the session. Chosen on half of the
# public sets' cases, see bench/RESULTS.md ("A keyword hit vouched for by rarity or meaning").
NEAR_MATCH_GAP = 0.02
FAR_HIT_SHARE = 0.25


def keyword_hit_gate(similarity: float | None, best_similarity: float, rarity: float) -> float:
    """How much one keyword hit counts beside the vector list, ``FAR_HIT_SHARE``-1: in full
    when the query's found terms are rare in the session (``keyword_rarity_weight``) or when
    the hit is about as close in meaning as the vector list's best match; a quarter when it
    is neither. Common chat words match many turns by chance, and those turns are seldom
    also near the query in meaning; a rare term, or a hit that meaning agrees with, is
    evidence of its own."""
    gap = best_similarity - (similarity if similarity is not None else -1.0)
    closeness = min(1.0, max(0.0, 1.0 - gap / NEAR_MATCH_GAP))
    near = FAR_HIT_SHARE + (1.0 - FAR_HIT_SHARE) * closeness
    return max(near, keyword_rarity_weight(rarity))


def decayed_order(
    candidates: Sequence[AnchorCandidate],
    scores: Sequence[float],
    *,
    now: datetime,
    decay: DecayPolicy,
) -> list[AnchorCandidate]:
    """One channel's candidates ordered by its own score times the time-decay weight.

    Decay acts inside each channel, on the channel's score, as in vector-only recall: applied
    after fusion it would swamp the fused score (one rank apart is ~1.6% in RRF, while the
    decay weight goes down to ``min_weight``)."""

    def key(pair: tuple[AnchorCandidate, float]) -> tuple[float, float, int]:
        candidate, value = pair
        weighted = value * decay.weight_at(candidate.created_at, now)
        return (-weighted, -candidate.created_at.timestamp(), -candidate.id)

    return [candidate for candidate, _ in sorted(zip(candidates, scores, strict=True), key=key)]


@dataclass(frozen=True)
class TimeScope:
    """What a pure time question keeps: turns said inside ``[start, end)`` and the turns
    ``referring`` to a time inside it (said earlier: "我明天上午要去体检")."""

    start: datetime
    end: datetime
    referring: frozenset[int] = frozenset()

    def __contains__(self, candidate: AnchorCandidate) -> bool:
        return self.start <= candidate.created_at < self.end or candidate.id in self.referring


def merge_time_candidates(
    said: Sequence[AnchorCandidate],
    referring: Sequence[AnchorCandidate],
    *,
    by_meaning: bool,
) -> list[AnchorCandidate]:
    """One time channel from the turns said in a range and those talking about it: by
    similarity when both lists are ordered by meaning, else the said ones first."""
    known = {c.id for c in said}
    merged = [*said, *(c for c in referring if c.id not in known)]
    if by_meaning:
        merged.sort(key=lambda c: -c.similarity)  # stable: equal ones keep their order
    return merged


def fuse_channels(
    channels: Sequence[Channel],
    *,
    rrf_k: float = 60.0,
    within: TimeScope | None = None,
) -> list[RankedAnchor]:
    """Reciprocal rank fusion of ranked channels, best first (ties: the more recent first).

    A turn found by several channels adds up ``weight / (rrf_k + rank)`` from each. With
    ``within`` only the turns in that scope are kept (a pure time question).
    """
    scores: dict[int, float] = {}
    best: dict[int, AnchorCandidate] = {}
    for channel in channels:
        for rank, candidate in enumerate(channel.candidates, start=1):
            if within is not None and candidate not in within:
                continue
            strength = 1.0 if channel.strengths is None else channel.strengths[candidate.id]
            share = channel.weight * strength / (rrf_k + rank)
            scores[candidate.id] = scores.get(candidate.id, 0.0) + share
            known = best.get(candidate.id)
            if known is None or candidate.similarity > known.similarity:
                best[candidate.id] = candidate
    ranked = [RankedAnchor(best[turn_id], score) for turn_id, score in scores.items()]
    ranked.sort(key=lambda r: (-r.score, -r.candidate.created_at.timestamp(), -r.candidate.id))
    return ranked


def partner_of(anchor: MemoryTurn, around: Sequence[MemoryTurn]) -> MemoryTurn | None:
    """The turn beside ``anchor`` (``around``: its window in time order) that carries its
    meaning: the line that answers it (the next, said by someone else), else the line it
    answers (the previous, by someone else); None when both neighbours are the same
    speaker's. "对，上周二！" means nothing without the question before it; "周五的周会改到下午
    三点了" is answered by the line after it."""
    at = next((i for i, turn in enumerate(around) if turn.id == anchor.id), None)
    if at is None:
        return None

    def other(i: int) -> bool:
        if not 0 <= i < len(around):
            return False
        turn = around[i]
        return (turn.role, turn.user_id) != (anchor.role, anchor.user_id) or (
            turn.sender_name != anchor.sender_name
        )

    return next((around[i] for i in (at + 1, at - 1) if other(i)), None)


# What a memory line costs beside its text: "[2024-01-16 10:30:15] (5小时前) user(小明): " (the
# prompt's ``lang.timefmt.format_memory_line``). Counted with each turn's characters, so that
# many short turns spend the allowance as a few long ones do, and the prompt does not grow.
LINE_COST = 32


@dataclass(frozen=True)
class AnchorFloor:
    """Which anchors after the first ``keep`` the prompt's recall may spend on: one whose
    cosine to the query is more than ``gap`` below the best of the first ``keep``, or whose
    fused score is under ``ratio`` times the best's, or whose cosine is under ``least``, is
    left out, and the text it would have taken goes to the kept anchors' partners and
    windows, or stays unspent. Without a bound every anchor counts (``NO_FLOOR``)."""

    keep: int = 1
    gap: float | None = None
    ratio: float | None = None
    least: float | None = None

    def kept(
        self, anchors: Sequence[RankedAnchor], shown: Collection[int] = ()
    ) -> list[RankedAnchor]:
        """``anchors`` less the ones below the floor, in their order. The first ``keep`` not
        ``shown`` set it: a line already in the prompt is no measure of what recall adds."""
        head = [a for a in anchors if a.candidate.id not in shown][: self.keep]
        if not head:
            return list(anchors)
        best_similarity = max(a.candidate.similarity for a in head)
        best_score = max(a.score for a in head)
        first = {a.candidate.id for a in head}

        def admitted(anchor: RankedAnchor) -> bool:
            similarity = anchor.candidate.similarity
            if self.gap is not None and similarity < best_similarity - self.gap:
                return False
            if self.ratio is not None and anchor.score < self.ratio * best_score:
                return False
            return self.least is None or similarity >= self.least

        return [a for a in anchors if a.candidate.id in first or admitted(a)]


NO_FLOOR = AnchorFloor()
# The prompt's recall with the bundled model leaves out an anchor whose cosine is more than
# 0.04 below the best anchor's: a weak match after the best takes text without bringing
# evidence. Picked by leave-one-set-out on the public sets by evidence per prompt character
# (bench/RESULTS.md, "A relevance floor for the prompt's anchors"); measured for that model's
# cosines only (``Retriever``: NO_FLOOR with any other).
ANCHOR_FLOOR = AnchorFloor(keep=1, gap=0.04)


def evidence_windows(
    query: str,
    anchors: Sequence[RankedAnchor],
    window_rows: Sequence[tuple[int, MemoryTurn]],
    *,
    top_n: int,
    window: int,
    shown: Collection[int] = (),
    floor: AnchorFloor = ANCHOR_FLOOR,
) -> RecallResult:
    """The prompt's dialogue: no more text than the best ``top_n`` anchors' ±``window`` turns
    hold, spent where the evidence is.

    ``anchors`` best first, ``window_rows`` each anchor's ±window turns. The allowance is the
    characters of the first ``top_n`` anchors' windows, each line's ``LINE_COST`` included
    (what the prompt carried before, so the prompt does not grow), and at most as many turns
    as those windows could hold. It is spent on every anchor above ``floor`` first, best
    first (a weak match gives its text back, ``AnchorFloor``); then, while
    it lasts, on each anchor's partner (``partner_of``), then on the rest of each window
    nearest first (reading aids). A turn that does not fit is skipped and a shorter later one
    may still fit. Anchors first and no preference for distinct spots: measured on the public
    sets (bench/RESULTS.md, 2026-12-07) at equal characters, partners before further anchors
    and pushing anchors near a better one back both lost.
    ``shown``: turns already in the prompt (its short-term memory), neither spent on nor
    counted, as the prompt's block leaves them out of the windows too; the best anchor not
    shown always fits.
    Windows come out best anchor first, each with the turns spent on it (merged when they
    share a turn, ``assemble_windows``), so the prompt's block takes them in that order.
    """
    around: dict[int, list[MemoryTurn]] = {a.candidate.id: [] for a in anchors}
    for anchor_id, turn in window_rows:
        around.setdefault(anchor_id, []).append(turn)
    for rows in around.values():
        rows.sort(key=lambda t: (t.created_at, t.id))
    by_id = {t.id: t for rows in around.values() for t in rows}
    present = [a for a in anchors if a.candidate.id in by_id]  # gone since (deleted): skip
    before: dict[int, MemoryTurn] = {}  # the first top_n anchors' windows
    for anchor in present[:top_n]:
        rows = around[anchor.candidate.id]
        at = next(i for i, t in enumerate(rows) if t.id == anchor.candidate.id)
        before.update(
            (t.id, t) for i, t in enumerate(rows) if abs(i - at) <= window and t.id not in shown
        )
    allowance = sum(len(t.content) + LINE_COST for t in before.values())
    # The best anchor not already in the prompt always fits: the best windows being mostly
    # short-term turns must not leave the evidence out.
    best = next((a for a in present if a.candidate.id not in shown), None)
    if best is not None:
        allowance = max(allowance, len(by_id[best.candidate.id].content) + LINE_COST)
    turns = top_n * (2 * window + 1)
    present = floor.kept(present, shown)  # the allowance stays that of the first top_n
    spent: dict[int, list[MemoryTurn]] = {a.candidate.id: [] for a in present}
    chosen: set[int] = set()
    used = 0

    def spend(anchor: RankedAnchor, turn: MemoryTurn | None) -> None:
        nonlocal used
        if turn is None or turn.id in chosen or turn.id in shown or len(chosen) >= turns:
            return
        cost = len(turn.content) + LINE_COST
        if used + cost > allowance:
            return
        chosen.add(turn.id)
        used += cost
        spent[anchor.candidate.id].append(turn)

    for anchor in present:
        spend(anchor, by_id[anchor.candidate.id])
    for anchor in present:
        spend(anchor, partner_of(by_id[anchor.candidate.id], around[anchor.candidate.id]))
    for anchor in present:
        rows = around[anchor.candidate.id]
        at = next(i for i, t in enumerate(rows) if t.id == anchor.candidate.id)
        for i in sorted(range(len(rows)), key=lambda i: (abs(i - at), i < at)):
            spend(anchor, rows[i])
    taken = [a for a in present if spent[a.candidate.id]]
    rows_spent = [(a.candidate.id, t) for a in taken for t in spent[a.candidate.id]]
    return assemble_windows(query, taken, rows_spent)
