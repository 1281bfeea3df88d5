"""The recall debugger: what the bot would put in the prompt for one message, and why.

It prepares a reply's prompt on the bot's own path (``conversation.preparation``) for a
message typed by the operator, as a given session at a given time, without storing the message
or counting any memory as used, and shows the short-term turns, the recall with each
candidate's channel scores, the memory context within the token budget, and the final chat
messages.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from ..context.builder import MemoryContext
from ..conversation.preparation import PromptPreparer, not_before
from ..lang.keywords import document_terms, query_terms
from ..lang.timerange import analyse_query
from ..models import MemoryTurn, TurnInput, generate_session_key
from ..recall import retriever
from ..recall.ranking import DecayPolicy

if TYPE_CHECKING:
    from ..parts import MemoryParts

# Candidates shown beyond the ones recall keeps, so a near miss can be seen.
WIDER_RECALL = 3

KEPT = "进入提示词"
RECENT = "已在近期对话中（作为聊天记录发送）"
OVER_BUDGET = "超出记忆的词元预算，被裁掉"
NOT_TOP = "排名未进前 {top_n}"


@dataclass(frozen=True)
class Candidate:
    """One anchor recall considered, with its scores and what became of it."""

    rank: int
    turn: MemoryTurn | None
    fused: float  # the score recall ranked by (similarity × decay, or the channel fusion)
    similarity: float  # cosine to the query (0 when only another channel found it)
    keyword_hits: tuple[str, ...]
    decay: float
    fate: str
    rerank: float | None = None  # the reranker's relevance, when one is configured


@dataclass(frozen=True)
class RecallTrace:
    """Everything the debugger shows for one message."""

    session_key: str
    message: str
    now: datetime
    search_text: str
    time_range: str | None
    candidates: tuple[Candidate, ...]
    context: MemoryContext
    recent: tuple[MemoryTurn, ...]
    messages: tuple[dict[str, str], ...]
    budget: int


def _decay(parts: MemoryParts) -> DecayPolicy:
    return retriever.DECAY


async def trace_recall(
    parts: MemoryParts,
    *,
    user_id: int,
    group_id: int | None,
    message: str,
    now: datetime,
    sender_name: str | None = None,
    bot_name: str | None = None,
    group_name: str | None = None,
    preparer: PromptPreparer | None = None,
) -> RecallTrace:
    """Prepare the prompt for ``message`` from this session at ``now`` as a reply would (the
    bot's own path, ``conversation.preparation``), and add what became of each candidate."""
    s = parts.settings
    asked = TurnInput(
        user_id=user_id,
        group_id=group_id,
        role="user",
        content=message,
        sender_name=sender_name,
        created_at=now,
    )
    # The bot's own preparer when given: its short-term window is where the bot's is.
    preparer = preparer or PromptPreparer(parts, bot_name=bot_name)
    tail = await preparer.read_tail(asked, now)
    asked = not_before(asked, tail.previous_at)
    prepared = await preparer.prepare(asked, tail, now, group_name=group_name, touch=False)
    if prepared.failure is not None:
        raise prepared.failure
    assert prepared.context is not None and prepared.recalled is not None
    assert prepared.options is not None
    context, recalled = prepared.context, prepared.recalled
    # The same query (context included) asked for more anchors, so a near miss can be seen.
    wider = await parts.retriever.recall(
        user_id,
        prepared.question,
        group_id,
        dataclasses.replace(
            prepared.options, top_n=max(s.memory_top_n, 1) * WIDER_RECALL, window_size=0
        ),
    )
    recent_ids = {t.id for t in prepared.recent}
    when = analyse_query(message, now, parts.tz)
    wanted = set(query_terms(recalled.search_text or prepared.question))
    decay = _decay(parts)
    # Windows that share turns are merged, so a candidate may be inside another's window.
    recalled_ids = {t.id for w in recalled.windows for t in w.turns}
    turns = {t.id: t for w in (*recalled.windows, *wider.windows) for t in w.turns}
    reranked = dict(wider.rerank_scores)
    candidates = []
    for rank, window in enumerate(wider.windows, start=1):
        turn = turns.get(window.anchor_id)
        age = 0.0 if turn is None else max(0.0, (now - turn.created_at).total_seconds() / 86400)
        hits = sorted(wanted & set(document_terms(turn.content))) if turn is not None else []
        if window.anchor_id in context.turn_ids:
            fate = KEPT
        elif window.anchor_id in recent_ids:
            fate = RECENT
        elif window.anchor_id in recalled_ids:
            fate = OVER_BUDGET
        else:
            fate = NOT_TOP.format(top_n=s.memory_top_n)
        candidates.append(
            Candidate(
                rank=rank,
                turn=turn,
                fused=window.score,
                similarity=window.similarity,
                keyword_hits=tuple(hits),
                decay=decay.weight(age),
                fate=fate,
                rerank=reranked.get(window.anchor_id),
            )
        )
    return RecallTrace(
        session_key=generate_session_key(user_id, group_id),
        message=message,
        now=now,
        search_text=recalled.search_text or prepared.question,
        time_range=None if when is None else when.range.expression,
        candidates=tuple(candidates),
        context=context,
        recent=prepared.recent,
        messages=tuple(prepared.messages),
        budget=context.budget,  # the one the prompt was built within (tools, a tight group)
    )
