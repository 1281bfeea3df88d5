"""Replies that show where a memory came from.

Where citing is on (every private chat; groups with CHAT_CITE_IN_GROUPS), the recalled dialogue
lines of the prompt carry numbers (``#1``, ``#2`` … in time order: ``context.block``) and the
system prompt (``CITE_RULE``) asks the model to end an answer that rests on one of them with a
marker naming it, ``【引用#2】``. The engine takes every marker out of the answer before it is
sent, stored or cached, also a malformed one and also where citing is off (``read_marks``): a
marker never reaches the person. The first number named (the strongest) is the one the reply
quotes (``Citations.resolve``), when its turn

* is a numbered line of this very prompt (a number the prompt does not show names nothing),
* is still stored and live, in the session being answered (never another chat, nor another
  member's line in a shared group), checked as the reply is sent, not when the prompt was made,
* carries the QQ message id the platform gave it (imported and MCP-remembered turns have none),
* and is not being recalled (撤回) or forgotten (/忘记) at that moment (``Citations.retracting``,
  ``Citations.forgetting``: those deletes wait for the session, so they land after the reply),
  nor taken by a /forget of a person or a whole chat under way or done meanwhile
  (``Citations.forgetting_scope``: ``Forgetting.forget`` runs inside it; it does not wait for
  the sessions it takes, so a quote already on its way is sent before it deletes, and a quote
  read while one began or ended is read again: ``Citations.quoting``), nor one such a /forget
  waits in the spool to delete while the database is away, also across a restart
  (``Citations.hold_back``).

At most one turn is quoted; the front end builds the quote (the plugin: a OneBot reply
segment). The rule is a fixed part of the system prompt, the same for every message of a chat,
and the numbers are only in the memory block, in the note of the moment that changes at every
message anyway: the beginning a provider's prefix cache reuses stays as it was
(``bench/prompt_prefix.py``).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from datetime import datetime

from ..context.builder import MemoryContext
from ..dialogue.recall_store import PgRecallStore
from ..errors import MemoryCoreError
from ..models import ForgetScope, MemoryTurn, RecalledMessage
from ..stages import stage
from ..storage.database_handle import Database

log = logging.getLogger(__name__)

CITE_RULE = (
    "- 相关记忆每行开头有编号（如 #2）。回答如果依据了其中某一条，"
    "在回答最后另起一行写【引用#编号】，依据几条就写几个、最主要的在前（如【引用#2#5】）；"
    "没有依据记忆就不写。这一行不会发给对方。"
)
"""The line of the system prompt's rules that asks for the marker (only where citing is on)."""

# What the model may write for a marker, strict or not: a keyword (the rule's 引用, or 记忆/来源/
# 出处 from the prompt's wording), then numbers. In brackets of any kind (``【引用#2】``,
# ``[引用: 2, 5]``; with ``#`` the closing bracket may be missing, and ``【引用】`` names nothing),
# or bare with ``#`` (``引用#2``). Prose that says 引用 or 记忆 (``（引用鲁迅的话）``, ``（记忆 20
# 年前…``) has no ``#`` and no closed bracket, and stays.
_WORD = r"(?:引用|记忆|来源|出处)"
_HASH = r"[#＃][ \t]*\d{1,3}"
_NUMBER = r"[#＃]?[ \t]*\d{1,3}"
_MORE = rf"(?:[ \t]*[,，、/和及;；]?[ \t]*{_NUMBER})*"
_OPEN, _CLOSE = r"[【\[［〔(（<《]", r"[】\]］〕)）>》]"
_MARKER = re.compile(
    rf"{_OPEN}[ \t]*{_WORD}[ \t]*[:：]?[ \t]*"
    rf"(?:{_HASH}{_MORE}[ \t]*{_CLOSE}?|\d{{1,3}}{_MORE}[ \t]*{_CLOSE}|{_CLOSE})"
    rf"|{_WORD}[ \t]*[:：]?[ \t]*{_HASH}{_MORE}"
)
# A last line of bare numbers (``#2 #5``): the marker with its brackets and keyword forgotten.
_BARE_NUMBER = r"[#＃]\d{1,3}"
_BARE_LAST_LINE = re.compile(
    rf"^[ \t]*{_BARE_NUMBER}(?:[ \t]*[,，、/]?[ \t]*{_BARE_NUMBER})*[ \t]*$"
)
_DIGITS = re.compile(r"\d+")


@dataclass(frozen=True)
class MarkedAnswer:
    """An answer with its markers taken out, and the numbers they named (in order, once)."""

    text: str
    numbers: tuple[int, ...]


def read_marks(answer: str) -> MarkedAnswer:
    """Take the citation markers out of ``answer`` (see the module docstring). A line left
    empty by it goes; the rest of the text is kept as the model wrote it."""
    numbers: list[int] = []

    def take(match: re.Match[str]) -> str:
        numbers.extend(int(d) for d in _DIGITS.findall(match.group(0)))
        return ""

    lines = answer.strip().split("\n")
    if len(lines) > 1 and _BARE_LAST_LINE.match(lines[-1]):
        numbers_last = [int(d) for d in _DIGITS.findall(lines.pop())]
    else:
        numbers_last = []
    kept: list[str] = []
    for line in lines:
        cleaned = _MARKER.sub(take, line)
        if cleaned == line:
            kept.append(line)
        elif cleaned.strip():
            kept.append(cleaned.rstrip())
    numbers.extend(numbers_last)
    return MarkedAnswer("\n".join(kept).strip(), tuple(dict.fromkeys(numbers)))


@dataclass(frozen=True)
class Citation:
    """The stored turn a reply quotes, with the QQ message id the quote points at."""

    turn: MemoryTurn
    message_id: int


# A quote read again this many times, each time a forget began or ended during the read, is
# given up rather than read forever.
QUOTE_READS = 3


def _may_take(scope: ForgetScope, turn: MemoryTurn) -> bool:
    """Whether a /forget of ``scope`` may take ``turn``: its person or group, in any QQ
    account's memory (while the forget runs, withholding one quote too many costs nothing)."""
    if scope.everything:
        return True
    if scope.user_id is not None and turn.user_id != scope.user_id:
        return False
    if scope.group_id is not None and turn.group_id != scope.group_id:
        return False
    return not (scope.private_only and turn.group_id is not None)


class Citations:
    """Which recalled turn a reply quotes (``resolve``, ``quoting``), over the memory's
    ``database``; deletes under way say which turns no reply may quote meanwhile."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._withheld: list[Callable[[MemoryTurn], bool]] = []
        # Withholds begun or ended so far: a quote read across one is read again.
        self._changes = 0
        self._sending: list[tuple[MemoryTurn, asyncio.Event]] = []  # quotes on their way
        self._deferred: list[tuple[ForgetScope, Callable[[MemoryTurn], bool]]] = []

    @contextmanager
    def retracting(self, message: RecalledMessage) -> Iterator[None]:
        """While a recalled (撤回) ``message`` waits to be forgotten, no reply quotes it."""

        def recalled(turn: MemoryTurn) -> bool:
            return (
                turn.message_id == message.message_id
                and turn.group_id == message.group_id
                and (message.self_id is None or turn.self_id in (None, message.self_id))
            )

        with self._withholding(recalled):
            yield

    @contextmanager
    def forgetting(self, turn_ids: Iterable[int]) -> Iterator[None]:
        """While the turns ``turn_ids`` wait to be forgotten (/忘记), no reply quotes them."""
        ids = frozenset(turn_ids)
        with self._withholding(lambda turn: turn.id in ids):
            yield

    @asynccontextmanager
    async def forgetting_scope(self, scope: ForgetScope) -> AsyncIterator[None]:
        """While a /forget of ``scope`` deletes, and once it has, no reply quotes a turn it
        takes. It does not wait for the sessions it takes (a whole chat, a person everywhere):
        a quote of such a turn already being sent goes out first, then the delete begins."""
        with self._withholding(lambda turn: _may_take(scope, turn)):
            while on_way := [sent for turn, sent in self._sending if _may_take(scope, turn)]:
                await asyncio.wait([asyncio.ensure_future(sent.wait()) for sent in on_way])
            yield

    def hold_back(self, scope: ForgetScope) -> None:
        """A /forget of ``scope`` waits in the spool for the database (``Forgetting.forget``
        deferred it): no reply quotes a turn it takes until ``let_go`` (its flush)."""
        self._withheld.append(lambda turn: _may_take(scope, turn))
        self._deferred.append((scope, self._withheld[-1]))
        self._changes += 1

    def let_go(self, scope: ForgetScope) -> None:
        """The deferred /forget of ``scope`` is done (``hold_back``)."""
        for entry in [e for e in self._deferred if e[0] == scope]:
            self._deferred.remove(entry)
            self._withheld.remove(entry[1])

    @contextmanager
    def _withholding(self, withheld: Callable[[MemoryTurn], bool]) -> Iterator[None]:
        # Those deletes wait for the session, so for the reply under way to be sent first.
        self._withheld.append(withheld)
        self._changes += 1
        try:
            yield
        finally:
            self._withheld.remove(withheld)
            # A quote read while this delete ran may have seen its turn before it went.
            self._changes += 1

    @asynccontextmanager
    async def quoting(
        self,
        context: MemoryContext | None,
        numbers: Sequence[int],
        session_key: str,
        now: datetime,
    ) -> AsyncIterator[Citation | None]:
        """The quote of a reply being sent (``resolve``), held as on its way until the
        block ends: a /forget taking its turn waits for it (``forgetting_scope``). A turn read
        while a delete began or ended is read again; one withheld is not quoted."""
        cited: Citation | None = None
        if numbers:
            with stage("cite"):
                for _ in range(QUOTE_READS):
                    changes = self._changes
                    cited = await self.resolve(context, numbers, session_key, now)
                    if cited is None or changes == self._changes:
                        break
                else:
                    log.info("session %s: quote read while deletes ran; not quoted", session_key)
                    cited = None
        # No await from here to the registration: a forget begins either before the check
        # (and the quote is withheld) or after it (and waits for the send).
        if cited is not None and any(w(cited.turn) for w in self._withheld):
            log.info("session %s: the quoted turn is being forgotten; not quoted", session_key)
            cited = None
        if cited is None:
            yield None
            return
        sending = (cited.turn, asyncio.Event())
        self._sending.append(sending)
        try:
            yield cited
        finally:
            self._sending.remove(sending)
            sending[1].set()

    async def resolve(
        self,
        context: MemoryContext | None,
        numbers: Sequence[int],
        session_key: str,
        now: datetime,
    ) -> Citation | None:
        """The turn a reply in ``session_key`` quotes for the ``numbers`` its answer named
        (the first one only) in a prompt built with ``context``; ``None`` when it names
        nothing quotable (see the module docstring)."""
        if not numbers or context is None or not context.numbered:
            return None
        number = numbers[0]
        if not 1 <= number <= len(context.turn_ids):
            log.info("session %s: the answer cited #%d, which its prompt did not show",
                     session_key, number)  # fmt: skip
            return None
        try:
            store = self._database.store(PgRecallStore)
            turn = await store.live_turn(context.turn_ids[number - 1], session_key, now)
        except MemoryCoreError as exc:
            log.warning("session %s: the cited turn could not be read: %s", session_key, exc)
            return None
        if turn is None or turn.message_id is None or any(w(turn) for w in self._withheld):
            log.info("session %s: the answer cited #%d, not quotable", session_key, number)
            return None
        log.info("session %s: the reply quotes turn %d (#%d)", session_key, turn.id, number)
        return Citation(turn=turn, message_id=turn.message_id)
