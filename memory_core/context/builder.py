"""Prompt assembly within one token budget.

The budget (MEMORY_MAX_TOKENS, counted with the core's ``TokenCounter`` on the whole text) is
filled in a fixed priority: the user's preferences, the facts relevant to the message (by the
relevance floor ``/回忆`` uses), recent conversation summaries, then the recalled dialogue
(``block.build_memory_block`` with what is left), then the facts found below that floor with
what the dialogue left: a fact unrelated to the message never displaces a recalled line that
matches it. Every line carries its time like a dialogue line::

    --- 用户偏好 ---
    [2024-01-16 10:30:15] (5小时前) 偏好(沟通风格): 喜欢简洁的回复

With ``settled`` (a private chat) the preferences and summaries, which do not depend on the
message, come apart as ``MemoryContext.settled``, dated without the relative time (which
changes with every message): the prompt puts them at the end of the system prompt, so they are
part of the beginning a provider's prefix cache reuses, until a new one is distilled.

Nothing appears twice: a memory already shown (same kind and content, e.g. from two chats in
the user scope) is skipped, and dialogue turns in ``exclude_ids`` (the short-term turns the
chat engine puts in the messages) are left out of the recalled windows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

from ..distill.keeper import MemoryKeeper
from ..distill.memory import CATEGORY_ZH, DistilledMemory, content_hash, flatten
from ..lang.timefmt import format_absolute, relative_time_zh
from ..lang.tokens import TokenCounter
from ..models import RecallResult, RecallWindow
from ..recall.listing import Relevance
from ..recall.options import RecallOptions
from ..recall.retriever import Retriever
from ..settings import MemorySettings
from .block import LineBudget, MemoryBlock, build_memory_block

Distilled = tuple[
    list[DistilledMemory], list[DistilledMemory], list[DistilledMemory], list[DistilledMemory]
]
"""Preferences, relevant facts, recent summaries, and the facts found for the message that are
below its relevance floor (``ContextBuilder.distilled``)."""

PREFERENCES_HEADER = "--- 用户偏好 ---"
FACTS_HEADER = "--- 关于用户的事实 ---"
SUMMARIES_HEADER = "--- 近期对话摘要 ---"
_LABELS = {"preferences": "偏好", "facts": "事实", "summary": "摘要"}
# Distilled lines a prompt gets at most, by kind (settings until 2026-12-07 that no operator
# changed); the memory budget (MEMORY_MAX_TOKENS) cuts them further.
DISTILLED_FACTS = 5
DISTILLED_PREFERENCES = 5
DISTILLED_SUMMARIES = 3


@dataclass(frozen=True)
class MemoryContext:
    """The memory text for the prompt and what went into it.

    ``tokens`` is the count of ``text`` (never above the budget); ``dropped`` counts the
    distilled lines and dialogue windows that did not fit.
    """

    text: str
    tokens: int
    preference_ids: tuple[int, ...] = ()
    fact_ids: tuple[int, ...] = ()
    summary_ids: tuple[int, ...] = ()
    turn_ids: tuple[int, ...] = ()
    dropped: int = 0
    settled: str = ""  # the preferences and summaries, apart (``assemble_context(settled=)``)
    budget: int = 0  # the token budget it was built within (the one in force for this reply)
    numbered: bool = False  # the dialogue lines carry numbers: ``#n`` is ``turn_ids[n - 1]``

    @property
    def distilled_ids(self) -> tuple[int, ...]:
        return self.preference_ids + self.fact_ids + self.summary_ids

    @property
    def personal(self) -> bool:
        """Whether any memory of this person went in (then the answer cache must not serve)."""
        return bool(self.distilled_ids or self.turn_ids)


def format_distilled_line(
    memory: DistilledMemory, now: datetime, tz: ZoneInfo, *, relative: bool = True
) -> str:
    """``[2024-01-16 10:30:15] (5小时前) 事实(个人信息): 用户住在北京（提到 3 次）``.

    The time is when the memory was last confirmed; the text is kept on one line.
    ``relative=False`` leaves out ``(5小时前)``, so the line stays the same as time passes.
    """
    label = _LABELS[memory.kind]
    if memory.category:
        label = f"{label}({CATEGORY_ZH.get(memory.category, memory.category)})"
    text = flatten(memory.content)
    if memory.kind == "summary":
        if memory.key_topics:
            text += f"（主题：{'、'.join(flatten(t) for t in memory.key_topics)}）"
        if memory.action_items:
            text += f"（待办：{'；'.join(flatten(a) for a in memory.action_items)}）"
    elif memory.times_mentioned > 1:
        text += f"（提到 {memory.times_mentioned} 次）"
    stamp = format_absolute(memory.last_confirmed, tz)
    if not relative:
        return f"[{stamp}] {label}: {text}"
    return f"[{stamp}] ({relative_time_zh(memory.last_confirmed, now, tz)}) {label}: {text}"


def assemble_context(
    *,
    preferences: Sequence[DistilledMemory],
    facts: Sequence[DistilledMemory],
    summaries: Sequence[DistilledMemory],
    windows: Sequence[RecallWindow],
    budget: LineBudget,
    settled: bool = False,
    loose_facts: Sequence[DistilledMemory] = (),
) -> MemoryContext:
    """Fill ``max_tokens`` in priority order (see the module docstring); pure.

    Each section takes its items in the given order (best first) while they fit; an item that
    does not fit is skipped and a shorter later one may still fit. The dialogue block gets
    what is left (``block.LineBudget`` says how lines are dated, counted and labelled).
    ``settled``: the preferences and summaries go to ``settled`` (without relative times,
    so they are counted within the budget as the longer lines they were), the rest to ``text``.
    ``loose_facts``: facts below the relevance floor of this message (``ContextBuilder``):
    they take only what the dialogue leaves, so an unrelated fact never displaces a recalled
    line that matches the message.
    """
    now, tz, counter, max_tokens = budget.now, budget.tz, budget.counter, budget.max_tokens
    if max_tokens <= 0:
        everything = len(preferences) + len(facts) + len(summaries) + len(windows)
        everything += len(loose_facts)
        return MemoryContext(text="", tokens=0, dropped=everything, budget=max(max_tokens, 0))
    accepted: list[tuple[str, DistilledMemory, str]] = []  # (header, memory, line)
    seen: set[tuple[str, str]] = set()
    dropped = 0
    used = 0  # tokens of the text so far
    last: str | None = None  # its last line

    def appended(used: int, last: str | None, line: str) -> int:
        # The tokens of a text of ``used`` tokens ending in ``last`` once "\n" + line is added.
        # Pre-tokenisation never joins a line end to the next line's start ("[" or "-"), so
        # only the last line's end is recounted; the whole text is counted exactly below.
        if last is None:
            return counter.count(line)
        return used - counter.count(last) + counter.count(last + "\n") + counter.count(line)

    sections = (
        (PREFERENCES_HEADER, preferences),
        (FACTS_HEADER, facts),
        (SUMMARIES_HEADER, summaries),
    )
    for header, memories in sections:
        opened = False
        for memory in memories:
            key = (memory.kind, content_hash(memory.content))
            if key in seen:
                continue
            line = format_distilled_line(memory, now, tz)
            total = used if opened else appended(used, last, header)
            total = appended(total, last if opened else header, line)
            if total > max_tokens:
                dropped += 1
                continue
            used, last, opened = total, line, True
            seen.add(key)
            accepted.append((header, memory, line))

    def render(entries: Sequence[tuple[str, DistilledMemory, str]]) -> str:
        out: list[str] = []
        current = None
        for header, _, line in entries:
            if header != current:
                out.append(header)
                current = header
            out.append(line)
        return "\n".join(out)

    prefix = render(accepted)
    while accepted and counter.count(prefix) > max_tokens:  # never in practice; kept as a guard
        accepted.pop()
        dropped += 1
        prefix = render(accepted)
    chosen: dict[str, list[int]] = {"preferences": [], "facts": [], "summary": []}
    for _, memory, _ in accepted:
        chosen[memory.kind].append(memory.id)

    prefix_tokens = counter.count(prefix)
    left = max_tokens - (counter.count(prefix + "\n") if prefix else 0)
    block = build_memory_block(windows, budget.within(left))
    text = f"{prefix}\n{block.text}" if prefix and block.text else prefix or block.text
    tokens = counter.count(text)
    # Joining may merge tokens at the seam; shrink the dialogue until the whole text fits.
    while tokens > max_tokens and block.text:
        left -= tokens - max_tokens
        block = build_memory_block(windows, budget.within(left))
        text = f"{prefix}\n{block.text}" if prefix and block.text else prefix or block.text
        tokens = counter.count(text)
    if not block.text:
        text, tokens = prefix, prefix_tokens
    # The facts below the relevance floor take only what the dialogue left (``loose_facts``).
    for memory in loose_facts:
        key = (memory.kind, content_hash(memory.content))
        if key in seen:
            continue
        entry = (FACTS_HEADER, memory, format_distilled_line(memory, now, tz))
        at = max((i + 1 for i, e in enumerate(accepted) if e[0] != SUMMARIES_HEADER), default=0)
        trial = render([*accepted[:at], entry, *accepted[at:]])
        trial_text = f"{trial}\n{block.text}" if block.text else trial
        trial_tokens = counter.count(trial_text)
        if trial_tokens > max_tokens:
            dropped += 1
            continue
        accepted.insert(at, entry)
        seen.add(key)
        text, tokens = trial_text, trial_tokens
        chosen["facts"].append(memory.id)
    apart = ""
    if settled:
        kept = [(h, m, format_distilled_line(m, now, tz, relative=False)) for h, m, _ in accepted]
        apart = render([e for e in kept if e[0] != FACTS_HEADER])
        fact_lines = render([e for e in accepted if e[0] == FACTS_HEADER])
        text = "\n".join(part for part in (fact_lines, block.text) if part)
    return MemoryContext(
        text=text,
        tokens=tokens,
        settled=apart,
        budget=max_tokens,
        preference_ids=tuple(chosen["preferences"]),
        fact_ids=tuple(chosen["facts"]),
        summary_ids=tuple(chosen["summary"]),
        turn_ids=block.turn_ids,
        dropped=dropped + block.dropped_windows,
        numbered=budget.numbered,
    )


class ContextBuilder:
    """Gathers preferences, relevant facts, recent summaries and recalled dialogue for one
    message and assembles them (``assemble_context``); what went in counts as used."""

    def __init__(
        self,
        *,
        settings: MemorySettings,
        keeper: MemoryKeeper | None,
        counter: TokenCounter,
        tz: ZoneInfo,
        retriever: Retriever | None = None,
    ) -> None:
        """``retriever``: recalls the dialogue when a caller of ``build`` brings none."""
        self._settings = settings
        self._keeper = keeper
        self._retriever = retriever
        self._counter = counter
        self._tz = tz

    def format_block(
        self,
        result: RecallResult,
        now: datetime | None = None,
        max_tokens: int | None = None,
        asker: int | None = None,
    ) -> MemoryBlock:
        """The time-stamped memory block of ``result`` within the token budget (MEMORY_MAX_TOKENS
        unless ``max_tokens``); ``asker`` labels a shared group's other members."""
        tokens = self._settings.memory_max_tokens if max_tokens is None else max_tokens
        now = now or datetime.now(timezone.utc)
        budget = LineBudget(now, self._tz, self._counter, tokens, asker=asker)
        return build_memory_block(result.windows, budget)

    async def distilled(
        self, user_id: int, group_id: int | None, query: str, now: datetime
    ) -> Distilled:
        """The preferences, the facts relevant to ``query`` (the recall's ``search_text``) and
        the recent summaries, as ``build`` reads them; a caller that knows the search text
        before the recall reads them beside it and hands them to ``build``."""
        keeper, s = self._keeper, self._settings
        if keeper is None or not s.memory_distilled_enabled:
            return [], [], [], []
        preferences, hits, summaries = await asyncio.gather(
            keeper.recall_by_type(
                user_id,
                group_id,
                "preferences",
                limit=DISTILLED_PREFERENCES,
                now=now,
                by_importance=True,
            ),
            keeper.recall(
                user_id,
                group_id,
                query,
                kinds=("facts",),
                top_k=DISTILLED_FACTS,
                now=now,
                touch=False,
            ),
            keeper.recall_by_type(user_id, group_id, "summary", limit=DISTILLED_SUMMARIES, now=now),
        )
        # The floor /回忆 and search_memory show by (``recall.listing.Relevance``): a fact
        # below it is not about this message and must not displace a line that is.
        relevance = Relevance.of(query, s, now)
        relevant = [h.memory for h in hits if relevance.admits(h.memory.content, h.similarity)]
        loose = [h.memory for h in hits if h.memory not in relevant]
        return preferences, relevant, summaries, loose

    async def build(
        self,
        user_id: int,
        group_id: int | None,
        query: str,
        *,
        now: datetime | None = None,
        exclude_ids: Collection[int] = (),
        recall: RecallResult | Awaitable[RecallResult] | None = None,
        max_tokens: int | None = None,
        touch: bool = True,
        settled: bool = False,
        distilled: Distilled | None = None,
        numbered: bool = False,
    ) -> MemoryContext:
        """The memory context for ``query`` in this session (see ``assemble_context``):
        preferences, relevant facts, recent summaries, then recalled dialogue (minus
        ``exclude_ids``, the short-term turns already in the messages) within
        MEMORY_MAX_TOKENS (or ``max_tokens``); ``settled``: the preferences and summaries
        apart, for a private chat's system prompt.

        ``recall``: dialogue already recalled by the caller, or a recall still to be awaited
        (then awaited beside the distilled memory's reads); ``None``: recalled here, as of
        ``now``, by the ``retriever``.
        ``touch=False`` leaves the use counts alone (a look at the prompt, not a reply).
        ``distilled``: the distilled memory already read for the recall's search text
        (``distilled``), with ``recall`` already recalled. ``numbered``: the dialogue lines
        carry the numbers the chat model cites (``conversation.citation``).
        """
        now = now or datetime.now(timezone.utc)
        if recall is None:
            if self._retriever is None:
                raise ValueError("no recall given and no retriever to make one")
            recall = self._retriever.recall(user_id, query, group_id, RecallOptions(now=now))
        budget = self._settings.memory_max_tokens if max_tokens is None else max_tokens
        if not isinstance(recall, RecallResult):
            (preferences, facts, summaries, loose), recalled = await asyncio.gather(
                self.distilled(user_id, group_id, query, now), recall
            )
        elif distilled is not None:
            (preferences, facts, summaries, loose), recalled = distilled, recall
        else:
            # The recall's search text (the query less its time words) has just been embedded:
            # searching facts with it costs no second embedding.
            text = recall.search_text or query
            found = await self.distilled(user_id, group_id, text, now)
            (preferences, facts, summaries, loose), recalled = found, recall
        context = assemble_context(
            preferences=preferences,
            facts=facts,
            summaries=summaries,
            windows=recalled.windows,
            budget=LineBudget(
                now, self._tz, self._counter, budget, exclude_ids, asker=user_id, numbered=numbered
            ),
            settled=settled,
            loose_facts=loose,
        )
        if touch and self._keeper is not None and context.distilled_ids:
            await self._keeper.touch(context.distilled_ids, now)
        return context
