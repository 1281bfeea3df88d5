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

from ..dialogue.source_store import PgSourceStore
from ..lang.utterance import (
    Kind,
    echoes_pairs,
    is_non_answer,
    is_question,
    pairs,
    restated_pairs,
)
from ..models import MemoryTurn
from ..storage.database_handle import Database
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
    """Each turn's kind (``lang.utterance.kind_of``); a bot line is an echo of a person's
    statement among ``turns`` said before it. Each text is analysed once (a recall's head is
    twenty turns or more: comparing texts pair by pair would cost milliseconds)."""
    found: dict[int, Kind] = {}
    statements: list[tuple[tuple[datetime, int], frozenset[str]]] = []
    for turn in turns:
        if turn.role == "assistant":
            continue
        asks = is_question(turn.content)
        found[turn.id] = Kind.QUESTION if asks else Kind.STATEMENT
        if not asks:
            statements.append(((turn.created_at, turn.id), pairs(turn.content)))
    for turn in turns:
        if turn.role != "assistant":
            continue
        if is_non_answer(turn.content):
            found[turn.id] = Kind.NON_ANSWER
            continue
        said_at = (turn.created_at, turn.id)
        restated = restated_pairs(turn.content)
        if any(at < said_at and echoes_pairs(restated, said) for at, said in statements):
            found[turn.id] = Kind.ECHO
        else:
            found[turn.id] = Kind.QUESTION if is_question(turn.content) else Kind.STATEMENT
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
    database: Database, ranked: Sequence[RankedAnchor], *, head: int
) -> list[RankedAnchor]:
    """``demoted`` for a recall: the first ``head`` anchors' turns read by id in one query
    (they were found in the recall's scope already)."""
    if len(ranked) < 2:
        return list(ranked)
    turns = await database.store(PgSourceStore).turns_by_id([a.candidate.id for a in ranked[:head]])
    return demoted(ranked, list(turns.values()), head)
