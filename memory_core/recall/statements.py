"""Statements over questions and echoes: a recall's ranked anchors with the lines that carry no
fact of their own — a question, the bot's "I don't know", the bot's restatement of what a person
said (``lang.utterance``) — put below the statement that holds the fact.

* A question, or an echo, goes just below the best statement under it that it is about: for a
  question, a statement holding at least half of its search terms (``lang.keywords``: "周会改到
  几点了？" and "周五的周会改到下午三点了"); for an echo, the statement it restates. With no such
  statement in the head it stays where it is: a question may be all there is ("我上次问你什么
  来着？"), and a topic that comes back is found by the question that opened it (Chit-Chat:
  weighing every question down cost 0.029 of its any@5, ``bench/RESULTS.md``, 2026-12-07).
* The bot's non-answer carries nothing, whatever is around it: its score is weighed by
  ``NON_ANSWER_WEIGHT``, so it still comes back when nothing better matches.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..dialogue.source_store import PgSourceStore
from ..lang.keywords import document_terms, query_terms
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

NON_ANSWER_WEIGHT = 0.5
"""The fused score's weight for the bot's "I don't know" (a statement: 1)."""


def kinds(turns: Sequence[MemoryTurn]) -> tuple[dict[int, Kind], dict[int, frozenset[int]]]:
    """Each turn's kind (``lang.utterance``), and for each question or echo the statements among
    ``turns`` it is about (an echo: those said before it that it restates). Each text is
    analysed once (a recall's head is twenty turns or more)."""
    found: dict[int, Kind] = {}
    about: dict[int, frozenset[int]] = {}
    statements: list[MemoryTurn] = []
    questions: list[MemoryTurn] = []
    for turn in turns:
        if turn.role == "assistant" and is_non_answer(turn.content):
            found[turn.id] = Kind.NON_ANSWER
        elif is_question(turn.content):
            found[turn.id] = Kind.QUESTION
            questions.append(turn)
        else:
            found[turn.id] = Kind.STATEMENT
            statements.append(turn)
    said = [s for s in statements if s.role == "user"]
    said_pairs = {s.id: pairs(s.content) for s in said}
    for turn in statements:
        if turn.role != "assistant":
            continue
        restated = restated_pairs(turn.content)
        sources = frozenset(
            s.id
            for s in said
            if (s.created_at, s.id) < (turn.created_at, turn.id)
            and echoes_pairs(restated, said_pairs[s.id])
        )
        if sources:
            found[turn.id] = Kind.ECHO
            about[turn.id] = sources
    if questions:
        terms = {s.id: set(document_terms(s.content)) for s in statements}
        for question in questions:
            asked = query_terms(question.content)
            if asked:
                about[question.id] = frozenset(
                    s.id
                    for s in statements
                    if found[s.id] is Kind.STATEMENT
                    and 2 * sum(term in terms[s.id] for term in asked) >= len(asked)
                )
    return found, about


def demoted(
    ranked: Sequence[RankedAnchor], turns: Sequence[MemoryTurn], head: int
) -> list[RankedAnchor]:
    """``ranked`` (best first) with the first ``head`` anchors placed by their kind (``turns``
    holds them; see the module), best first again; the order of equal scores kept."""
    found, about = kinds(turns)
    top = list(ranked[:head])
    scores = {a.candidate.id: a.score for a in top}
    moved: list[RankedAnchor] = []
    for position, anchor in enumerate(top):
        turn_id = anchor.candidate.id
        score = anchor.score
        if found.get(turn_id) is Kind.NON_ANSWER:
            score *= NON_ANSWER_WEIGHT
        elif turn_id in about:
            below = [scores[s] for s in about[turn_id] if s in scores and _after(top, s, position)]
            if below:  # just under the best statement it is about
                best = max(below)
                score = best - abs(best) * 1e-9
        moved.append(RankedAnchor(anchor.candidate, score))
    return sorted([*moved, *ranked[head:]], key=lambda a: -a.score)


def _after(top: Sequence[RankedAnchor], turn_id: int, position: int) -> bool:
    return any(a.candidate.id == turn_id for a in top[position + 1 :])


async def statements_first(
    database: Database, ranked: Sequence[RankedAnchor], *, head: int
) -> list[RankedAnchor]:
    """``demoted`` for a recall: the first ``head`` anchors' turns read by id in one query
    (they were found in the recall's scope already)."""
    if len(ranked) < 2:
        return list(ranked)
    turns = await database.store(PgSourceStore).turns_by_id([a.candidate.id for a in ranked[:head]])
    return demoted(ranked, list(turns.values()), head)
