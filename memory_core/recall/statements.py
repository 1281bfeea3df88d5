"""Statements over questions and echoes: a recall's ranked anchors with the lines that carry no
fact of their own — a question, the bot's "I don't know", the bot's restatement of what a person
said (``lang.utterance``) — weighed down, so the statement that holds the fact comes first.

The weight multiplies the fused score, so a demoted line still comes back when nothing better
matches (a question may be all there is: "我上次问你什么来着？"). ``DEMOTION`` was chosen by
leave-one-set-out on the public sets (``bench/RESULTS.md``, 2026-12-07). With fusion by
reciprocal rank the scores of a list are close together (1/61 and 1/70 at k=60), so the weight
moves a line a number of places rather than to the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from ..dialogue.recall_store import PgRecallStore, RecallScope
from ..lang.utterance import Kind, kind_of
from ..models import MemoryTurn
from .ranking import RankedAnchor

DEMOTION = 0.5
"""The fused score's weight for a question, a non-answer and an echo (a statement: 1)."""

WEIGHTS = {
    Kind.STATEMENT: 1.0,
    Kind.QUESTION: DEMOTION,
    Kind.NON_ANSWER: DEMOTION,
    Kind.ECHO: DEMOTION,
}


def kinds(turns: Sequence[MemoryTurn]) -> dict[int, Kind]:
    """Each turn's kind (``lang.utterance.kind_of``); a bot line is an echo of a person's line
    among ``turns`` said before it."""
    said = sorted((t for t in turns if t.role == "user"), key=lambda t: (t.created_at, t.id))
    found = {}
    for turn in turns:
        earlier = [s.content for s in said if (s.created_at, s.id) < (turn.created_at, turn.id)]
        found[turn.id] = kind_of(turn.content, turn.role, earlier)
    return found


def demoted(
    ranked: Sequence[RankedAnchor], turns: Sequence[MemoryTurn], head: int
) -> list[RankedAnchor]:
    """``ranked`` with the first ``head`` anchors' scores weighed by their kind (``turns``
    holds them), best first again; the order of equal scores kept."""
    weights = {turn_id: WEIGHTS[kind] for turn_id, kind in kinds(turns).items()}
    weighed = [
        RankedAnchor(a.candidate, a.score * weights.get(a.candidate.id, 1.0)) if i < head else a
        for i, a in enumerate(ranked)
    ]
    return sorted(weighed, key=lambda a: -a.score)


async def statements_first(
    store: PgRecallStore,
    scope: RecallScope,
    ranked: Sequence[RankedAnchor],
    now: datetime,
    *,
    head: int,
) -> list[RankedAnchor]:
    """``demoted`` for a recall: the first ``head`` anchors' turns read in one query."""
    if len(ranked) < 2:
        return list(ranked)
    top = [a.candidate for a in ranked[:head]]
    rows = await store.windows(scope=scope, anchors=top, window_size=0, now=now)
    return demoted(ranked, [turn for anchor_id, turn in rows if turn.id == anchor_id], head)
