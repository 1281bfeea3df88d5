"""Plain data that crosses the core's boundary: turns going in, rows coming out."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from .accounts import pending as pending_account
from .accounts import serving_self_id, tentative

Role = Literal["user", "assistant"]
ChatType = Literal["private", "group"]


def generate_session_key(
    user_id: int, group_id: int | None = None, account: str | None = None
) -> str:
    """Private chat: ``"{user_id}"``; group chat: ``"{group_id}:{user_id}"``; after the QQ
    account's namespace (``account``, by default the call's: ``memory_core.accounts``), which
    is ``""`` for the first account and ``"{self_id}/"`` for another (while the call's is not
    decided, the ``tentative`` one)."""
    if account is None:
        account = pending_account()
    prefix = tentative(serving_self_id()) if account is None else account
    return prefix + (f"{group_id}:{user_id}" if group_id is not None else str(user_id))


@dataclass(frozen=True)
class TurnInput:
    """One message to store. ``created_at`` defaults to now; ``message_uuid`` is derived."""

    user_id: int
    role: Role
    content: str
    group_id: int | None = None
    # The QQ bot account it was said to (by default the one the call serves): what decides
    # the turn's namespace when that is not decided yet (``account``).
    self_id: int | None = field(default_factory=serving_self_id)
    sender_name: str | None = None
    message_id: int | None = None
    created_at: datetime | None = None
    raw_segments: list[dict[str, Any]] | None = None
    message_uuid: str | None = None
    # The QQ account's namespace (memory_core.accounts), taken where the turn is made: a turn
    # spooled and written later stays its account's. None: not decided when it was made (the
    # first account was not known), decided from ``self_id`` when it is written.
    account: str | None = field(default_factory=pending_account)

    @property
    def session_key(self) -> str:
        """The turn's session key; of a turn whose account is not decided, a ``tentative``
        one (the writer decides the account before the key is stored)."""
        account = tentative(self.self_id) if self.account is None else self.account
        return generate_session_key(self.user_id, self.group_id, account)

    @property
    def chat_type(self) -> ChatType:
        return "group" if self.group_id is not None else "private"


@dataclass(frozen=True)
class MemoryTurn:
    """One stored turn, as read back from the database."""

    id: int
    message_uuid: str
    session_key: str
    self_id: int | None
    user_id: int
    group_id: int | None
    chat_type: ChatType
    role: Role
    content: str
    sender_name: str | None
    message_id: int | None
    created_at: datetime
    score: int | None
    expires_at: datetime | None
    token_count: int


@dataclass(frozen=True)
class AddOutcome:
    """What ``add_turn`` did: stored (``turn``), found a duplicate, spooled it (to be written
    later), dead-lettered it (the database refused its values; see ``dialogue.spool``), or
    kept nothing because its person opted out of that chat (``storage.opt_outs``); ``failed``
    when storing failed outright and the turn was kept nowhere (the chat engine goes on
    without memory)."""

    turn: MemoryTurn | None
    duplicate: bool = False
    spooled: bool = False
    dead_lettered: bool = False
    opted_out: bool = False
    failed: bool = False


@dataclass(frozen=True)
class RecallWindow:
    """An anchor turn and its neighbours (time order), with the anchor's ranking score."""

    anchor_id: int
    score: float
    similarity: float
    turns: tuple[MemoryTurn, ...]


@dataclass(frozen=True)
class RecallResult:
    """What recall found: windows in rank order, and all their turns merged in time order."""

    query: str
    windows: tuple[RecallWindow, ...] = ()
    turns: tuple[MemoryTurn, ...] = field(default=())
    # What the search looked for: the query less a time expression it understood, after the
    # conversation's lines when recall was given them ("" = query).
    search_text: str = ""
    # (anchor id, relevance) of the candidates a configured reranker scored (the debugger).
    rerank_scores: tuple[tuple[int, float], ...] = ()

    @property
    def anchor_ids(self) -> tuple[int, ...]:
        return tuple(window.anchor_id for window in self.windows)


@dataclass(frozen=True)
class Forgotten:
    """What one forget removed, by kind (a /forget answer names each)."""

    dialogues: int = 0
    facts: int = 0
    preferences: int = 0
    summaries: int = 0
    cached_answers: int = 0
    # Of ``dialogues``, the bot's own turns (its replies), where the delete counted them apart:
    # a 撤回 and a person's delete of items do, a /forget of a whole scope does not.
    bot_replies: int = 0
    # The database could not be reached: only turns waiting in the local spool went (counted
    # in ``dialogues``); what the database holds is deleted once it can be reached again.
    deferred: bool = False

    @property
    def total(self) -> int:
        return self.dialogues + self.facts + self.preferences + self.summaries + self.cached_answers


@dataclass(frozen=True)
class ForgetScope:
    """What a /forget deletes (``Forgetting.forget``): a user in a group (user and
    group), a user's private chat (user, ``private_only``), all of a user's chats (user), a
    whole group (group) or ``everything``. ``storage.scopes`` reads it in SQL and in Python."""

    user_id: int | None = None
    group_id: int | None = None
    private_only: bool = False
    everything: bool = False
    # The QQ account whose memory it is (memory_core.accounts); "everything" is all of it.
    # None: not decided when it was asked (the first account was not known): ``self_id``, the
    # bot it was asked through, decides it when it is done.
    account: str | None = field(default_factory=pending_account)
    self_id: int | None = field(default_factory=serving_self_id)


@dataclass(frozen=True)
class RecalledMessage:
    """A QQ message its sender recalled (撤回), in the chat the notice names: a group
    (``group_id``), or a private chat (``group_id`` None, with ``user_id``). ``None`` for
    ``self_id`` / ``user_id`` matches any (spool lines written before they were recorded)."""

    self_id: int | None
    message_id: int
    group_id: int | None = None
    user_id: int | None = None
