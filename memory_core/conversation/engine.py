"""The conversation engine, free of any bot framework.

One user message goes through :meth:`ConversationEngine.converse`:

1. the user turn is stored first, so nothing is lost if a later step fails (its embedding
   follows in the background, batched with other turns': only the query's is needed here);
2. short-term memory (the session's last few turns within a few minutes) and long-term memory
   are gathered: one token budget filled with the person's preferences, the relevant facts,
   recent summaries, then recalled dialogue windows minus what short-term memory already shows;
3. the prompt carries the current time, the timezone and the time rules, and offers a recap
   when the previous turn is more than an hour old, laid out so that a provider's prefix cache
   can reuse the beginning of the previous prompt (steps 2 and 3 are
   ``conversation.preparation``, the path the console's recall debugger takes too);
4. with the answer cache on (ANSWER_CACHE_ENABLED), a cached answer is sent instead of asking
   the model when the question is neither time-dependent nor personal (the policy is explained
   above ``_personal_for_lookup``);
5. otherwise the chat model answers (the markers naming the memory it used taken out: the reply
   quotes that message, ``conversation.citation``); the caller's ``send`` delivers the text;
   what was delivered is stored as the assistant turn, with the message id the chat platform
   gave it, the exchange is queued for evaluation and counted for extraction of distilled
   memory (both done in the background, never delaying the reply), and a memory-free answer
   is offered to the cache.

Messages of one session are handled one at a time, in arrival order; sessions run concurrently.
Once the reply is stored, the session's next message may begin while the exchange is queued
and counted; a command holding the session (``session``) waits for that too.
A message is never stored before the session's previous turn: QQ stamps messages to the second,
so two sent within one second would otherwise tie with (or precede) the first one's reply and
drop out of each other's short-term context.
Failures never escape as exceptions: the model failing gives a short apology, no model gives
a notice at most once per CHAT_NOTICE_INTERVAL in each chat (a private chat, or a whole group),
and the database being down gives an answer without memory. With CHAT_SLOW_NOTICE_AFTER set, a
model slower than that gets a short "稍等" first.

How the model is asked is ``conversation.asking``: with the memory tools when the model offers
them (CHAT_TOOLS, ``conversation.tools``; the memory block is then smaller), and within a
group's daily token budget (CHAT_GROUP_DAILY_TOKENS, ``conversation.budget``): a group past it
hears once that the bot rests for the day, then nothing until the day turns.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import Protocol

from ..accounts import serving
from ..answer_cache.store import CachedAnswer
from ..dialogue.turn_rows import message_uuid_for
from ..errors import InvalidTurnError, LLMError, MemoryCoreError
from ..models import AddOutcome, MemoryTurn, TurnInput, generate_session_key
from ..parts import MemoryParts
from ..providers.llm import ChatModel, PromptUsage
from ..stages import clocked, current_clock, stage
from ..storage.counters import PgCounterStore
from ..traffic import ReplyTraffic
from .asking import ModelAsking
from .budget import RESTING_NOTICE, BudgetState, GroupBudget
from .citation import Citation, read_marks
from .preparation import JUST_BEFORE, PreparedPrompt, PromptPreparer, Tail, not_before
from .tools import ChatScope, MemoryTools, StoredOptOuts

log = logging.getLogger(__name__)

APOLOGY = "抱歉，我这边暂时没法回答，请稍后再试。"
NOT_CONFIGURED_NOTICE = "聊天模型还没有配置，暂时不能聊天；你说的话我先记下了。"
SLOW_NOTICE = "稍等，我想一想……"
# The same message delivered twice (HTTP + WebSocket, a reconnect) arrives within minutes.
REDELIVERY_WINDOW = timedelta(minutes=10)
_NOTICE_TABLE_MAX = 4096


@dataclass(frozen=True)
class Delivery:
    """What actually reached the chat: the text sent and the platform's id of its message."""

    text: str
    message_id: int | None = None


class SendText(Protocol):
    """Delivers a reply; returns ``None`` when nothing reached the chat. Must not raise.

    ``cited``: the recalled turn the reply quotes (``conversation.citation``); passed only to
    a reply that cites one, never to a notice or an apology."""

    async def __call__(self, text: str, *, cited: Citation | None = None) -> Delivery | None: ...


class Outcome(enum.Enum):
    REPLIED = "replied"  # the model (or the answer cache) answered; delivered and stored
    APOLOGIZED = "apologized"  # the model failed; an apology was sent
    NOT_CONFIGURED = "not_configured"  # no model; the notice was sent
    QUIET = "quiet"  # no model; the notice was sent recently, so nothing was said
    RESTING = "resting"  # the group's daily token budget is spent: said so once, then quiet
    DUPLICATE = "duplicate"  # this message was already stored: handled before
    UNSENT = "unsent"  # the reply could not be delivered
    EMPTY = "empty"  # nothing storable in the message (blank text)


@dataclass(frozen=True)
class ChatResult:
    """What one ``converse`` call did."""

    outcome: Outcome
    user_turn: MemoryTurn | None = None
    reply_turn: MemoryTurn | None = None
    reply_text: str | None = None
    spooled: bool = False
    memory_available: bool = True
    messages: tuple[Mapping[str, str], ...] = ()
    from_cache: bool = False  # the reply came from the answer cache; the model was not asked
    cited: Citation | None = None  # the recalled turn the reply quoted


# Daily counters of the time memory took to read for a reply (the console's chart): how many
# replies, their milliseconds summed, and how many fell in each band.
RECALL_REPLIES = "recall_replies"
RECALL_MS_TOTAL = "recall_ms_total"
RECALL_BANDS = ((100.0, "recall_under_100ms"), (300.0, "recall_100_300ms"))
RECALL_SLOW = "recall_over_300ms"


def recall_metrics(milliseconds: float) -> dict[str, int]:
    band = next((name for limit, name in RECALL_BANDS if milliseconds < limit), RECALL_SLOW)
    return {RECALL_REPLIES: 1, RECALL_MS_TOTAL: round(milliseconds), band: 1}


# The answer cache and personal memory. The cache itself refuses questions with
# time words, first-person words or references to the conversation (``answer_cache.cache``); the
# engine adds what only it knows, what went into the prompt:
#
# * Serving: a question is personal when distilled facts or preferences about the person went
#   into the prompt; the reply should draw on what the bot knows of them, which a cached answer
#   cannot. ``MemoryContext.personal`` (any memory at all) is not the test: recall returns the
#   session's nearest turns for every message and summaries are not chosen by the question, so
#   in an active session it is nearly always true and even the operator's preloaded public
#   answers (which hold nobody's memory) would never be served.
# * Caching: an answer is written only when the model saw no memory of the person at all (no
#   distilled memory, no recalled dialogue, no short-term turns), so every cached answer is a
#   function of the question alone. Yet the question itself can carry a private detail (the
#   first message of a private chat), so run-time entries belong to one user in one chat and
#   are looked up only there, as recall never lets one chat's words reach another.
#
# Both keep the cache's refusals in force: a time-dependent or personal answer is never served.
def _personal_for_lookup(prompt: PreparedPrompt) -> bool:
    context = prompt.context
    return context is None or bool(context.fact_ids or context.preference_ids)


def _personal_for_caching(prompt: PreparedPrompt) -> bool:
    return prompt.context is None or prompt.context.personal or bool(prompt.recent)


def _complete(delivered: str, answer: str) -> bool:
    """Whether all of ``answer`` was delivered (pieces are trimmed and joined by newlines)."""
    return "".join(delivered.split()) == "".join(answer.split())


class SessionLocks:
    """One ``asyncio.Lock`` per session, dropped as soon as nobody holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    def __len__(self) -> int:
        return len(self._locks)

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        entry = self._locks.get(key)
        if entry is None:
            entry = (asyncio.Lock(), [0])
            self._locks[key] = entry
        lock, users = entry
        users[0] += 1
        try:
            with stage("lock"):
                await lock.acquire()  # wakes waiters in FIFO order: arrival order is kept
            try:
                yield
            finally:
                lock.release()
        finally:
            users[0] -= 1
            if users[0] == 0 and self._locks.get(key) is entry:
                del self._locks[key]


class Settling:
    """What a session's answered messages still do after leaving the session's turn (queue
    the exchange, count it), so that whoever holds the session for a command can wait for it."""

    def __init__(self) -> None:
        self._tasks: dict[str, set[asyncio.Future[object]]] = {}

    def start(self, key: str, work: Awaitable[object]) -> asyncio.Future[object]:
        """Run ``work`` for session ``key`` now; await the returned future for its end."""
        task = asyncio.ensure_future(work)
        tasks = self._tasks.setdefault(key, set())
        tasks.add(task)

        def done(finished: asyncio.Future[object]) -> None:
            tasks.discard(finished)
            if not tasks and self._tasks.get(key) is tasks:
                del self._tasks[key]

        task.add_done_callback(done)
        return task

    async def wait(self, key: str) -> None:
        """Until the work started for session ``key`` so far has ended (failed or not)."""
        tasks = self._tasks.get(key)
        if tasks:
            await asyncio.wait(set(tasks))


_SPLIT_PREFERENCE = (
    re.compile(r"\n\s*\n"),  # paragraph
    re.compile(r"\n"),  # line
    re.compile(r"(?<=[。！？!?；;…])"),  # sentence end
    re.compile(r"(?<=[，,、：:])|(?<=\s)"),  # clause or word boundary
)


def split_reply(text: str, max_chars: int) -> list[str]:
    """Cut ``text`` into pieces of at most ``max_chars``, preferring paragraph, line, sentence
    and clause boundaries (in that order) in the second half of each piece; hard cut otherwise.
    Pieces are trimmed; empty pieces are dropped."""
    if max_chars < 1:
        raise ValueError("max_chars must be >= 1")
    pieces: list[str] = []
    rest = text.strip()
    while len(rest) > max_chars:
        window = rest[: max_chars + 1]
        cut = 0
        for pattern in _SPLIT_PREFERENCE:
            ends = [m.end() if m.end() > m.start() else m.start() for m in pattern.finditer(window)]
            ends = [end for end in ends if max_chars // 2 <= end <= max_chars]
            if ends:
                cut = ends[-1]
                break
        if cut == 0:
            cut = max_chars
            # never cut a surrogate pair or a "\r\n" in two
            if rest[cut - 1 : cut + 1] == "\r\n" or "\ud800" <= rest[cut - 1] <= "\udbff":
                cut -= 1
        piece = rest[:cut].strip()
        if piece:
            pieces.append(piece)
        rest = rest[cut:].strip()
    if rest:
        pieces.append(rest)
    return pieces


class ConversationEngine:
    """Turns one user message into one reply, with memory (see the module docstring)."""

    def __init__(
        self,
        *,
        parts: MemoryParts,
        chat_model: ChatModel | None,
        bot_name: str | None = None,
        clock: Callable[[], datetime] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        usage: PromptUsage | None = None,
    ) -> None:
        """``parts``: the memory's parts the engine reads and counts with (``open_memory``
        builds them; turns are stored by ``parts.writer``: database, or the spool).
        ``usage``: where the chat model adds up the prompt tokens its answers report
        (``OpenAIChatModel.usage``); counted per day after each reply (``/memstat``)."""
        self._parts = parts
        self._writer = parts.writer
        self._model = chat_model
        self._usage = usage if usage is not None else PromptUsage()
        self._settings = parts.settings
        self._bot_name = bot_name
        self._asking = _asking(parts, chat_model, bot_name)
        self.preparer = PromptPreparer(
            parts,
            bot_name=bot_name,
            memory_budget=self._asking.memory_tokens_for if self._asking else None,
        )
        """How this engine prepares a prompt; the console's debugger looks through it."""
        self._clock = clock or (lambda: datetime.now(timezone.utc))
        self._monotonic = monotonic
        self._locks = SessionLocks()
        self._settling = Settling()
        self._last_notice: dict[str, float] = {}
        self.traffic = ReplyTraffic()
        """The replies under way: work that can wait (reading pictures) waits for a gap."""
        self.citations = parts.citations
        """Which recalled turn a reply quotes; a 撤回 marks its message there while it waits."""

    @property
    def chat_configured(self) -> bool:
        return self._model is not None

    @property
    def active_sessions(self) -> int:
        """Sessions with a message being handled or waiting (their locks exist only then)."""
        return len(self._locks)

    @asynccontextmanager
    async def session(self, user_id: int, group_id: int | None) -> AsyncIterator[None]:
        """Hold a session: what runs inside comes after the session's earlier messages are
        handled and before its later ones (for commands that read or delete its memory)."""
        key = generate_session_key(user_id, group_id)
        async with self._locks.hold(key):
            await self._settling.wait(key)
            yield

    async def record(self, turn: TurnInput) -> AddOutcome | None:
        """Store a turn without answering (unaddressed group messages, notes).

        Kept in order with the session's conversation. Returns ``None`` when the turn cannot be
        stored (blank text) or storing failed (logged).
        """
        with serving(turn.account, turn.self_id):
            async with self._locks.hold(turn.session_key):
                return await self._store(self._stamped(turn))

    async def converse(
        self,
        turn: TurnInput,
        send: SendText,
        *,
        group_name: str | None = None,
        ready: Callable[[TurnInput], Awaitable[TurnInput]] | None = None,
    ) -> ChatResult:
        """Store ``turn`` (a user message), answer it through ``send``, store the answer.

        ``group_name`` (looked up by the caller) tells the model which group it is in.
        ``ready`` finishes the turn first, in the session's order (the plugin waits there a
        moment for the message's pictures to be read): later messages still come after it. All
        of it — the memory read, the reply stored — is in the turn's QQ account's memory
        (``TurnInput.account``, ``memory_core.accounts``)."""
        with (
            clocked(self._settings.memory_stage_times),
            serving(turn.account, turn.self_id),
            self.traffic.replying(),
        ):
            return await self._converse(turn, send, group_name=group_name, ready=ready)

    async def _converse(
        self,
        turn: TurnInput,
        send: SendText,
        *,
        group_name: str | None,
        ready: Callable[[TurnInput], Awaitable[TurnInput]] | None,
    ) -> ChatResult:
        async with self._locks.hold(turn.session_key):
            if ready is not None:
                with stage("ready"):
                    turn = await ready(turn)
            turn = self._stamped(turn)
            with stage("tail"):
                tail = await self._tail(turn)
            turn = not_before(turn, tail.previous_at)
            budget = self._asking.state(turn.group_id, self._now(turn)) if self._asking else None
            if self._model is None or budget is BudgetState.SPENT:
                stored = await self._store(turn)
                prompt = PreparedPrompt(messages=[], question="")
            else:
                # Memory is read only up to just before this message, so reading it need not
                # wait for the message to be stored; the model is asked only after both.
                stored, prompt = await asyncio.gather(
                    self._store(turn), self._prepare(turn, tail, group_name)
                )
            if stored is None:
                return ChatResult(Outcome.EMPTY)
            if stored.duplicate and _reused_message_id(stored.turn, turn):
                stored = await self._store(_as_new_message(turn)) or stored
            if stored.duplicate:
                log.info(
                    "message %s of session %s was delivered again; answered before, ignored",
                    turn.message_id,
                    turn.session_key,
                )
                return ChatResult(Outcome.DUPLICATE, user_turn=stored.turn)
            if self._model is None:
                return await self._notice(turn, send, stored)
            if budget is BudgetState.SPENT:
                return await self._rest(turn, send, stored)
            result = partial(
                ChatResult,
                user_turn=stored.turn,
                spooled=stored.spooled,
                memory_available=prompt.memory_ok,
                messages=tuple(prompt.messages),
            )

            now = self._now(turn)
            with stage("cache_lookup"):
                cached = await self._cached(turn, prompt, now)
            searched = False  # the model read memory through a tool: its answer is not cached
            cited_numbers: tuple[int, ...] = ()
            if cached is not None:
                answer = cached.answer
            else:
                scope = ChatScope(
                    turn.user_id,
                    turn.group_id,
                    before=turn.created_at or now,
                    source_turn_id=stored.turn.id if stored.turn is not None else None,
                )
                try:
                    with stage("model"):
                        answer, searched = await self._ask_model(
                            prompt.messages, send, scope, budget or BudgetState.OPEN
                        )
                    # The markers naming the memory used never reach the person (citation).
                    marked = read_marks(answer)
                    answer, cited_numbers = marked.text, marked.numbers
                    if not answer:
                        raise LLMError("the chat model gave an empty answer")
                except (LLMError, asyncio.TimeoutError) as exc:
                    log.warning("chat model failed for session %s: %s", turn.session_key, exc)
                    await send(APOLOGY)
                    await self._keep_unanswered(stored.turn)
                    return result(Outcome.APOLOGIZED)

            # The quote is held until sent: a forget taking its turn waits for the send.
            async with self.citations.quoting(
                prompt.context,
                cited_numbers if stored.turn is not None else (),
                turn.session_key if stored.turn is None else stored.turn.session_key,
                self._now(turn),
            ) as cited:
                with stage("send"):
                    delivery = await (send(answer, cited=cited) if cited else send(answer))
            if delivery is None or not delivery.text.strip():
                log.warning("reply for session %s could not be delivered", turn.session_key)
                return result(Outcome.UNSENT, reply_text=answer, from_cache=cached is not None)
            reply = TurnInput(
                user_id=turn.user_id,
                group_id=turn.group_id,
                self_id=turn.self_id,
                role="assistant",
                content=delivery.text,
                sender_name=self._bot_name,
                message_id=delivery.message_id,
                created_at=max(self._clock(), self._after(turn)),
            )
            stored_reply = await self._store(reply)
            # Nothing of a person who opted out is kept: no turn (stored or spooled), no cache.
            kept = stored.turn is not None or stored.spooled
            if cached is None and kept and not searched and _complete(delivery.text, answer):
                with stage("cache_store"):
                    await self._cache(turn, prompt, answer, now)
            bookkeeping: list[Awaitable[None]] = []
            if stored.turn is not None and stored_reply is not None and stored_reply.turn:
                bookkeeping.append(self._enqueue_evaluation(stored.turn, stored_reply.turn))
                bookkeeping.append(self._note_exchange(turn, reply))
            bookkeeping.append(self._count_recall(prompt, now))
            settling = self._settling.start(turn.session_key, asyncio.gather(*bookkeeping))
        # The exchange is stored: the session's next message may go on while the exchange is
        # queued for evaluation and counted (each its own round trip, all at once); a command
        # holding the session (``session``: /forget) still comes after them.
        with stage("after_reply"):
            await settling
        return result(
            Outcome.REPLIED,
            reply_turn=stored_reply.turn if stored_reply else None,
            reply_text=delivery.text,
            from_cache=cached is not None,
            cited=cited,
        )

    # ------------------------------------------------------------------ steps

    def _stamped(self, turn: TurnInput) -> TurnInput:
        if turn.created_at is not None:
            return turn
        return dataclasses.replace(turn, created_at=self._clock())

    @staticmethod
    def _after(turn: TurnInput) -> datetime:
        # The reply is stored after the message it answers even if the message's own time
        # (taken from the chat platform) is a little ahead of this machine's clock.
        assert turn.created_at is not None
        return turn.created_at + JUST_BEFORE

    async def _keep_unanswered(self, turn: MemoryTurn | None) -> None:
        """An unanswered message expires like a scored one (see ``keep_unanswered``)."""
        if turn is None:
            return  # spooled while the database is away: the spool keeps it as it came
        try:
            await self._parts.evaluations.keep_unanswered(turn)
        except MemoryCoreError as exc:
            log.warning("could not set the expiry of an unanswered turn: %s", exc)

    async def _store(self, turn: TurnInput) -> AddOutcome | None:
        # Only the query's embedding is needed for the reply: the turn's own follows in the
        # background, batched with other sessions' turns.
        with stage(f"store_{turn.role}"):
            return await self._store_turn(turn)

    async def _store_turn(self, turn: TurnInput) -> AddOutcome | None:
        try:
            return await self._writer.add_turn(turn, embed_later=True)
        except InvalidTurnError as exc:
            log.info("turn of session %s not stored: %s", turn.session_key, exc)
            return None
        except MemoryCoreError as exc:
            log.error("turn of session %s could not be stored: %s", turn.session_key, exc)
            # Treat as stored-nowhere but keep the conversation going without memory.
            return AddOutcome(turn=None, failed=True)

    async def _enqueue_evaluation(self, user_turn: MemoryTurn, reply_turn: MemoryTurn) -> None:
        # Scoring runs in the memory's background worker; queueing is one quick insert.
        try:
            await self._parts.evaluations.enqueue(user_turn.id, reply_turn.id)
        except MemoryCoreError as exc:
            log.warning(
                "exchange of session %s not queued for evaluation: %s", user_turn.session_key, exc
            )

    async def _note_exchange(self, turn: TurnInput, reply: TurnInput) -> None:
        # Counts the exchange for extraction of distilled memory, which runs in the memory's
        # background worker; this is one quick upsert.
        try:
            await self._parts.extraction.note_exchange(
                turn.user_id, turn.group_id, reply.created_at
            )
        except MemoryCoreError as exc:
            log.warning(
                "exchange of session %s not counted for extraction: %s", turn.session_key, exc
            )

    async def _ask_model(
        self,
        messages: list[dict[str, str]],
        send: SendText,
        scope: ChatScope,
        budget: BudgetState,
    ) -> tuple[str, bool]:
        """The model's answer (through ``conversation.asking``, tools and budget) and whether
        it called a tool; past CHAT_SLOW_NOTICE_AFTER seconds a "稍等" is sent first (once:
        the reply deadline bounds the whole wait)."""
        assert self._asking is not None
        patience = self._settings.chat_slow_notice_after
        answer = asyncio.ensure_future(self._asking.ask(messages, scope, budget))
        try:
            if patience > 0:
                done, _ = await asyncio.wait({answer}, timeout=patience)
                if not done:
                    await send(SLOW_NOTICE)
            reply = await answer
            return reply.text.strip(), reply.tool_calls > 0
        finally:
            answer.cancel()  # only matters when this call itself is cancelled

    async def _tail(self, turn: TurnInput) -> Tail:
        # With no model only the previous turn's time matters (for stamping the message).
        tail = await self.preparer.read_tail(turn, self._now(turn), recent=self._model is not None)
        if tail.failure is not None:
            log.warning("last turn time unavailable for %s: %s", turn.session_key, tail.failure)
        return tail

    async def _prepare(self, turn: TurnInput, tail: Tail, group_name: str | None) -> PreparedPrompt:
        """The chat messages for the model (``conversation.preparation``, shared with the
        console's debugger); memory may be missing. The memory block is smaller with the tools
        offered or the group near its budget (``ModelAsking.memory_tokens_for``)."""
        with stage("prepare"):
            prompt = await self.preparer.prepare(turn, tail, self._now(turn), group_name=group_name)
        if prompt.failure is not None:
            log.warning("answering session %s without memory: %s", turn.session_key, prompt.failure)
        return prompt

    async def _notice(self, turn: TurnInput, send: SendText, stored: AddOutcome) -> ChatResult:
        # Once per interval in each chat: a group's members all read the same notice.
        interval = self._settings.chat_notice_interval
        now = self._monotonic()
        chat = f"g{turn.group_id}" if turn.group_id is not None else f"p{turn.user_id}"
        last = self._last_notice.get(chat)
        if last is not None and now - last < interval:
            return ChatResult(Outcome.QUIET, user_turn=stored.turn, spooled=stored.spooled)
        if len(self._last_notice) >= _NOTICE_TABLE_MAX:
            self._last_notice = {k: t for k, t in self._last_notice.items() if now - t < interval}
        self._last_notice[chat] = now
        await send(NOT_CONFIGURED_NOTICE)
        return ChatResult(Outcome.NOT_CONFIGURED, user_turn=stored.turn, spooled=stored.spooled)

    async def _rest(self, turn: TurnInput, send: SendText, stored: AddOutcome) -> ChatResult:
        # The group's budget is spent: said once today, then nothing (the turn is stored).
        assert self._asking is not None and turn.group_id is not None
        if self._asking.budget.announce(turn.group_id, self._now(turn)):
            log.info("group %s spent its daily token budget; resting", turn.group_id)
            await send(RESTING_NOTICE)
        return ChatResult(Outcome.RESTING, user_turn=stored.turn, spooled=stored.spooled)

    def _now(self, turn: TurnInput) -> datetime:
        assert turn.created_at is not None
        return max(self._clock(), turn.created_at)

    async def _cached(
        self, turn: TurnInput, prompt: PreparedPrompt, now: datetime
    ) -> CachedAnswer | None:
        """A cached answer for this message, if the cache is on and may serve it (when it is
        off, ``AnswerCacheOff`` serves nothing)."""
        if not prompt.memory_ok:
            return None
        try:
            found = await self._parts.answer_cache.lookup(
                prompt.question,
                turn.user_id,
                turn.group_id,
                personal=_personal_for_lookup(prompt),
                now=now,
            )
        except MemoryCoreError as exc:
            log.warning("answer cache lookup failed for session %s: %s", turn.session_key, exc)
            return None
        if found is not None:
            log.info(
                "session %s answered from the answer cache (%s)", turn.session_key, found.level
            )
        return found

    async def _count_recall(self, prompt: PreparedPrompt, now: datetime) -> None:
        # After the reply is delivered, like the cache: one counter upsert off the reply's path.
        # The prompt tokens are those of every answer since the last count (sessions run
        # concurrently: whichever counts first counts the others' too).
        metrics = self._usage.take()
        if prompt.memory_ms is not None:
            metrics.update(recall_metrics(prompt.memory_ms))
        clock = current_clock()
        if clock is not None:
            metrics.update(clock.metrics())
        if not any(metrics.values()):
            return
        try:
            day = now.astimezone(self._parts.tz).date()
            await self._parts.database.store(PgCounterStore).bump(day, metrics)
        except MemoryCoreError as exc:
            log.warning("recall latency and prompt tokens not counted: %s", exc)

    async def _cache(
        self, turn: TurnInput, prompt: PreparedPrompt, answer: str, now: datetime
    ) -> None:
        # After the reply is delivered: an embedding and one upsert, off the reply's path.
        if not prompt.memory_ok:
            return
        try:
            await self._parts.answer_cache.store(
                prompt.question,
                answer,
                turn.user_id,
                turn.group_id,
                personal=_personal_for_caching(prompt),
                now=now,
            )
        except MemoryCoreError as exc:
            log.warning("answer of session %s not cached: %s", turn.session_key, exc)


def _reused_message_id(stored: MemoryTurn | None, turn: TurnInput) -> bool:
    """Whether a "duplicate" is a new message whose id the platform reused: its text differs,
    or it came long after the stored one (a re-delivery comes within minutes)."""
    if stored is None or turn.created_at is None:
        return False
    return (
        stored.content != turn.content
        or abs(turn.created_at - stored.created_at) > REDELIVERY_WINDOW
    )


def _as_new_message(turn: TurnInput) -> TurnInput:
    assert turn.created_at is not None
    key = f"{message_uuid_for(turn)}:{turn.created_at.isoformat()}"
    return dataclasses.replace(turn, message_uuid=key)


def _asking(
    parts: MemoryParts, model: ChatModel | None, bot_name: str | None
) -> ModelAsking | None:
    """How the chat model is asked (``conversation.asking``): the memory tools bound to the
    memory's recall, distilled store and opt-outs, and the group budget."""
    if model is None:
        return None
    settings = parts.settings
    tools = (
        MemoryTools(
            recall=parts.retriever,
            notes=parts.keeper,
            opt_outs=StoredOptOuts(parts.database),
            settings=settings,
            bot_name=bot_name,
        )
        if settings.chat_tools != "off"
        else None
    )
    budget = GroupBudget(settings.chat_group_daily_tokens, parts.tz)
    return ModelAsking(model, settings, budget, tools)
