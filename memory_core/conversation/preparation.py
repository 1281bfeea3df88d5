"""How a reply's prompt is prepared: the one path the bot and the console's debugger share.

For one user message (a ``TurnInput`` with its time) a :class:`PromptPreparer` reads

1. the session's tail (``read_tail``): the previous turn's time and the short-term turns of the
   last CHAT_RECENT_MINUTES, in one round trip, before the message is stored; the message is
   then stamped after the previous turn (``not_before``);
2. the recall, with the conversational query (the message and the short-term turns, when
   MEMORY_QUERY_CONTEXT_TURNS > 0), as of just before the message;
3. the memory context within MEMORY_MAX_TOKENS: preferences, relevant facts, summaries, then
   the recalled dialogue minus the short-term turns (``context.builder``); in a private chat
   the preferences and summaries, which do not depend on the message, end the system prompt;
4. the chat messages (``prompt``): the system prompt, which stays the same across a chat's
   calls, the short-term turns in a window that moves in steps (``window``), then the note of
   this moment (time, memory) and the message, so a provider's prefix cache can reuse the rest.
   Where a reply may quote its memory (``cites``), the memory lines carry numbers and the system
   prompt the rule to cite them (``citation``).

In a group (CHAT_GROUP_WINDOW, on by default) the short-term turns are the group's: what every
member said to the bot there in the last minutes, and its replies, which every member sees in
the chat anyway. One window for the whole group means every member's call repeats the same
bytes up to the note, so the provider's cache serves the members' calls from one prefix. Only
the note differs per member, and only it carries memory (recall scopes it as before:
``recall.sharing``), so no member's private memory enters the part the members share.

``ConversationEngine.converse`` sends these messages to the model; ``console.debugger`` shows
them with ``touch=False``, so a look at the prompt counts no memory as used. Keeping both on
this one path is what makes the debugger show the recall the bot really makes
(``tests/core/conversation/test_one_prompt_path.py``). The answer-cache lookup is not part of
it: a lookup counts hits and misses, and the debugger must count nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..accounts import account_of_key
from ..context.builder import Distilled, MemoryContext
from ..dialogue.recall_store import PgRecallStore
from ..errors import MemoryCoreError
from ..lang.text import scrub
from ..models import MemoryTurn, RecallResult, TurnInput
from ..parts import MemoryParts
from ..recall.options import RecallOptions
from ..stages import stage
from .prompt import ChatPlace, build_chat_messages, build_moment_note, build_system_prompt
from .window import SteppedWindow

# The current message is excluded from its own recall by cutting recall off just before it.
JUST_BEFORE = timedelta(microseconds=1)
INPUT_CUT_MARK = "…[消息过长，其余 {dropped} 字略去]"
# A message is stored whole but reaches the chat model cut to this many characters (with
# ``INPUT_CUT_MARK``): a pasted log must not spend the prompt.
MAX_INPUT_CHARS = 4000
# The short-term window grows to this many times CHAT_RECENT_TURNS, then steps back to them:
# consecutive prompts share a prefix the provider caches (a setting until 2026-12-07 that no
# operator changed; bench/RESULTS.md, "Reaching the targets: a group-wide window, bigger
# steps", measured it against 2, the behaviour before).
RECENT_GROWTH = 3


@dataclass(frozen=True)
class Tail:
    """What a message reads of its session before it is stored: the previous turn's time and
    the short-term turns up to it (``failure``: the read failed; answer without memory)."""

    previous_at: datetime | None
    recent: tuple[MemoryTurn, ...] = ()
    failure: MemoryCoreError | None = None


@dataclass(frozen=True)
class PreparedPrompt:
    """The model's messages and what went into them."""

    messages: list[dict[str, str]]
    question: str  # the current message as the model sees it (also the answer cache's key)
    failure: MemoryCoreError | None = None  # memory could not be read: answered without it
    context: MemoryContext | None = None
    recent: tuple[MemoryTurn, ...] = ()
    recalled: RecallResult | None = None
    options: RecallOptions | None = None  # what the recall was asked with
    memory_ms: float | None = None  # how long reading memory took (recall and context)

    @property
    def memory_ok(self) -> bool:
        return self.failure is None


def prompt_text(content: str, max_chars: int) -> str:
    """The current message as the model gets it: storable text, cut (visibly) when very long."""
    text = scrub(content)
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + INPUT_CUT_MARK.format(dropped=len(text) - max_chars)


def not_before(turn: TurnInput, previous_at: datetime | None) -> TurnInput:
    """``turn`` stamped just after the session's previous turn if its own time is not later:
    QQ stamps messages to the second, so two sent within one second would otherwise tie with
    (or precede) the first one's reply and drop out of each other's short-term context."""
    assert turn.created_at is not None
    if previous_at is None or turn.created_at > previous_at:
        return turn
    return dataclasses.replace(turn, created_at=previous_at + JUST_BEFORE)


MemoryBudget = Callable[[int | None, datetime], "int | None"]
"""The memory block's token budget for a message in a group (or ``None``: a private chat) at
a time; ``None`` for MEMORY_MAX_TOKENS (``ModelAsking.memory_tokens_for``)."""


class PromptPreparer:
    """Prepares the prompt for one message (see the module docstring); stores nothing.

    ``memory_budget`` (the engine's): how big the memory block may be for a message, so the
    console's debugger, which prepares through the bot's own preparer, shows the same block."""

    def __init__(
        self,
        parts: MemoryParts,
        *,
        bot_name: str | None = None,
        memory_budget: MemoryBudget | None = None,
    ) -> None:
        """Reads through ``parts``: the session's tail from the dialogue's recall store, the
        recall from ``retriever``, the memory context from ``context_builder``."""
        self._database = parts.database
        self._retriever = parts.retriever
        self._context = parts.context_builder
        self._memory_budget = memory_budget
        self._settings = parts.settings
        self._tz = parts.tz
        self._bot_name = bot_name
        self._window = SteppedWindow(self._settings.chat_recent_turns, growth=RECENT_GROWTH)

    def memory_tokens(self, group_id: int | None, now: datetime) -> int | None:
        """The memory block's budget for a message of ``group_id`` at ``now`` (``None``:
        MEMORY_MAX_TOKENS): what ``/recall`` and MCP ``recall`` fit their list in."""
        budget = self._memory_budget
        return budget(group_id, now) if budget is not None else None

    async def read_tail(self, turn: TurnInput, now: datetime, *, recent: bool = True) -> Tail:
        """The session's last turn time up to ``now`` and, with ``recent``, its short-term
        turns of the last CHAT_RECENT_MINUTES (as many as the stepped window can show:
        RECENT_GROWTH times CHAT_RECENT_TURNS; in a group window, the group's), read in
        one round trip before ``turn`` is stored.

        Read up to this message's time, the recent turns are those ``prepare`` would read up
        to just before its (possibly later, ``not_before``) stamp: no turn of the session lies
        between the two, as the previous turn is the last one up to now."""
        limit = self._window.capacity
        minutes = self._settings.chat_recent_minutes
        try:
            store = self._database.store(PgRecallStore)
            if not recent or limit <= 0 or minutes <= 0:
                return Tail(await store.last_turn_time(turn.session_key, now))
            tail = await store.session_tail(
                turn.session_key,
                since=now - timedelta(minutes=minutes),
                now=now,
                limit=limit,
                group_id=turn.group_id if self._group_wide(turn) else None,
            )
        except MemoryCoreError as exc:
            return Tail(None, failure=exc)
        return Tail(tail.last_turn_at, tail.recent)

    async def prepare(
        self,
        turn: TurnInput,
        tail: Tail,
        now: datetime,
        *,
        group_name: str | None = None,
        touch: bool = True,
    ) -> PreparedPrompt:
        """The chat messages for ``turn`` at ``now`` and what went into them; memory that
        cannot be read is left out (``failure`` says why). ``touch=False`` counts no memory
        as used and leaves the short-term window where it is (a look, not a reply)."""
        assert turn.created_at is not None
        now = max(now, turn.created_at)
        cutoff = turn.created_at - JUST_BEFORE
        text = prompt_text(turn.content, MAX_INPUT_CHARS)
        recent: list[MemoryTurn] = []
        context: MemoryContext | None = None
        recalled: RecallResult | None = None
        options: RecallOptions | None = None
        failure: MemoryCoreError | None = None
        started = time.perf_counter()
        memory_ms: float | None = None
        try:
            if tail.failure is not None:
                raise tail.failure
            # Dialogue as of just before this message: it is being stored meanwhile and must
            # not come back as its own memory. Distilled memory as of now: the platform's clock
            # (the message's time) may lag behind the moment a fact was distilled.
            memory_tokens = self.memory_tokens(turn.group_id, now)
            recent = self._short_term(self._window_key(turn), tail, now, remember=touch)
            own = [t for t in recent if t.session_key == turn.session_key]
            options = self._recall_options(own, cutoff, tuple(t.id for t in recent))
            with stage("recall"):
                recalled, distilled = await self._recall(turn, text, options, now)
            with stage("context"):
                context = await self._context.build(
                    turn.user_id,
                    turn.group_id,
                    text,
                    now=now,
                    exclude_ids=tuple(t.id for t in recent),
                    recall=recalled,
                    max_tokens=memory_tokens,
                    touch=touch,
                    # A private chat's preferences and summaries join its system prompt; a
                    # group's system prompt is every member's, so there they stay in the
                    # member's note.
                    settled=turn.group_id is None,
                    distilled=distilled,
                    numbered=self.cites(turn),
                )
            memory_ms = (time.perf_counter() - started) * 1000
        except MemoryCoreError as exc:
            failure = exc
        with stage("prompt"):
            place = ChatPlace(turn.user_id, turn.sender_name, turn.group_id, group_name)
            system = build_system_prompt(
                bot_name=self._bot_name,
                persona=self._settings.chat_persona or None,
                place=place,
                settled=context.settled if context is not None else "",
                cite=self.cites(turn),
            )
            note = build_moment_note(
                now,
                self._tz,
                memory_block=context.text if context is not None else "",
                last_turn_at=tail.previous_at,
                place=place,
            )
            messages = build_chat_messages(
                system, note, recent, text, now, self._tz, sender_name=turn.sender_name
            )
        return PreparedPrompt(
            messages=messages,
            question=text,
            failure=failure,
            context=context,
            recent=tuple(recent),
            recalled=recalled,
            options=options,
            memory_ms=memory_ms,
        )

    async def _recall(
        self, turn: TurnInput, text: str, options: RecallOptions, now: datetime
    ) -> tuple[RecallResult, Distilled | None]:
        """The recall and, beside it, the distilled memory the context reads for the recall's
        search text (its facts search shares the recall's query vector: the embedder's cache
        lets the second asker wait for the first's embedding). ``None`` for the distilled
        memory when the recall searched another text after all: the context reads it then."""
        search_text = self._retriever.search_text(text, options)
        recalling = self._retriever.recall(turn.user_id, text, turn.group_id, options)
        reading = self._context.distilled(turn.user_id, turn.group_id, search_text or text, now)
        recalled, distilled = await asyncio.gather(recalling, reading, return_exceptions=True)
        for outcome in (recalled, distilled):
            if isinstance(outcome, BaseException):
                raise outcome
        assert isinstance(recalled, RecallResult) and not isinstance(distilled, BaseException)
        if (recalled.search_text or text) != (search_text or text):
            return recalled, None
        return recalled, distilled

    def cites(self, turn: TurnInput) -> bool:
        """Whether the reply to ``turn`` may quote the memory it rests on: in every private
        chat, in a group with CHAT_CITE_IN_GROUPS (``conversation.citation``)."""
        return turn.group_id is None or self._settings.chat_cite_in_groups

    def _group_wide(self, turn: TurnInput) -> bool:
        return turn.group_id is not None and self._settings.chat_group_window

    def _window_key(self, turn: TurnInput) -> str:
        """Whose stepped window a message shows: its group's (one start for every member, so
        their prompts carry the same turns) or its session's."""
        return (
            f"group:{account_of_key(turn.session_key)}{turn.group_id}"
            if self._group_wide(turn)
            else turn.session_key
        )

    def _short_term(
        self, session_key: str, tail: Tail, now: datetime, *, remember: bool
    ) -> list[MemoryTurn]:
        # ``now`` may have moved on since the tail was read: its window starts as late.
        since = now - timedelta(minutes=self._settings.chat_recent_minutes)
        recent = [t for t in tail.recent if t.created_at >= since]
        return self._window.shown(session_key, recent, remember=remember)

    def _recall_options(
        self, recent: Sequence[MemoryTurn], cutoff: datetime, shown: tuple[int, ...]
    ) -> RecallOptions:
        """A conversational query (MEMORY_QUERY_CONTEXT_TURNS > 0) is formed from the message
        and this session's short-term turns (in a group window, the member's own); ``shown``
        (every short-term turn in the prompt) is not recalled again."""
        context: tuple[str, ...] = ()
        if self._settings.memory_query_context_turns > 0:
            context = tuple(t.content for t in recent)
        return RecallOptions(now=cutoff, context=context, shown=shown)
