"""Whose memory a call reads and writes: one QQ bot account's (OneBot ``self_id``) of many on
one database, or the shared one.

An account's memory is a namespace of session keys: ``"{self_id}/"`` before the key of
``models.generate_session_key`` (``"B/123"``, ``"B/456:123"``). The first account that ever
connected owns the keys without a prefix, so the rows stored before memory was kept per account
stay where they are (nothing is rewritten) and belong to it; ``memory_meta`` remembers which
account that is (:class:`AccountBook`). With ``MEMORY_SHARE_ACCOUNTS=true`` every account uses
that unprefixed namespace, i.e. one memory.

The namespace of the call in progress is a context variable (:func:`serving`): the plugin sets it
once per OneBot event, so the many ``(user_id, group_id)`` calls below it (recall, forget, the
distilled memory, cached answers, exports) need no extra argument; a task started under it
inherits it. Work done later in the background takes the namespace from what it stores
(``TurnInput.account``, ``ForgetScope.account``, a session key).

Which account is the first can only be read from the database. While it cannot be (an event
came while the database was away, and no account was learned before), an account's namespace
is *not decided* (``None``): what is stored or forgotten then carries its bot's ``self_id`` and
gets its namespace when it is written (``AccountBook.decide``), also from the spool after the
outage; a read needs the database anyway, and raises ``DatabaseUnavailableError`` instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol

from .errors import DatabaseUnavailableError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Serving:
    # "" = the first account's (and the shared) namespace; "B/" = account B's; None = not
    # decided yet (the first account is not known), decided from ``self_id`` when written.
    namespace: str | None
    self_id: int | None


_UNSET = _Serving("", None)  # no bot: the CLI, MCP, the console
_current: ContextVar[_Serving] = ContextVar("memory_account", default=_UNSET)


def key_account(alias: str = "") -> str:
    """SQL of the namespace of a row's session key (``""`` or ``"B/"``): what an account
    condition compares with a :func:`current` value. ``alias`` is a constant of the caller."""
    column = f"{alias}session_key"
    return f"substr({column}, 1, strpos({column}, '/'))"


def current() -> str:
    """The namespace of the call in progress (``""`` when none was set: the first account), to
    read or write in now; ``DatabaseUnavailableError`` while it is not decided (the first
    account could not be read from the database)."""
    namespace = _current.get().namespace
    if namespace is None:
        raise DatabaseUnavailableError(
            "whose memory this QQ account's is, is not known yet: the database was unreachable"
        )
    return namespace


def pending() -> str | None:
    """The namespace of the call in progress, or ``None`` while it is not decided: what a turn
    or a /forget made now keeps, to be decided when it is written."""
    return _current.get().namespace


def serving_self_id() -> int | None:
    """The QQ bot account the call in progress serves (``None``: no bot, or not said)."""
    return _current.get().self_id


def tentative(self_id: int | None) -> str:
    """The namespace a key of a not yet decided turn is built in, for what never reaches the
    database under it (a session's lock, a log line): ``self_id``'s own, as if it were not
    the first account, so that nothing of another account is ever read by it."""
    return "" if self_id is None else f"{self_id}/"


def account_of_key(session_key: str) -> str:
    """The namespace a stored session key is in (the inverse of ``generate_session_key``)."""
    head, slash, _ = session_key.partition("/")
    return f"{head}/" if slash else ""


@contextmanager
def serving(account: str | None, self_id: int | None = None) -> Iterator[None]:
    """Run the block in ``account``'s namespace (from :meth:`AccountBook.namespace`) for bot
    ``self_id``; ``account`` ``None``: not decided yet (``self_id`` then decides it)."""
    token = _current.set(_Serving(account, self_id))
    try:
        yield
    finally:
        _current.reset(token)


class FirstAccountStore(Protocol):
    """Where the first account is recorded (``dialogue.upkeep_store.PgUpkeepStore``: the
    dialogue owns ``memory_meta``)."""

    async def claim_first_account(self, self_id: int) -> tuple[int, bool]: ...


class AccountBook:
    """Which QQ account owns the unprefixed namespace, and the namespace of each account.

    ``shared`` (``MEMORY_SHARE_ACCOUNTS``) gives every account the unprefixed one.
    """

    def __init__(self, *, shared: bool) -> None:
        self.shared = shared
        self.first: int | None = None

    async def adopt(self, store: FirstAccountStore, self_id: int) -> int:
        """Record ``self_id`` as the first account unless one already is (the rows stored
        before per-account memory are then its own); returns the first account. Logged once,
        by the process that claimed it."""
        self.first, claimed = await store.claim_first_account(self_id)
        if claimed:
            log.info(
                "QQ account %s is the first on this database: the memory stored before "
                "per-account memory is its own (MEMORY_SHARE_ACCOUNTS=%s)",
                self_id,
                "true" if self.shared else "false",
            )
        return self.first

    def namespace(self, self_id: int | None) -> str | None:
        """The namespace ``self_id`` reads and writes: ``""`` when shared, for the first
        account, and for a call without an account (CLI, MCP, console); else ``"{self_id}/"``.

        ``None`` (not decided) while no :meth:`adopt` named the first account: any account may
        be it, and the database that says which cannot be reached."""
        if self.shared or self_id is None or self_id == self.first:
            return ""
        if self.first is None:
            return None
        return f"{self_id}/"

    async def decide(self, store: FirstAccountStore, self_id: int | None) -> str:
        """``self_id``'s namespace, learning the first account from the database first when it
        is not known (claimed by ``self_id`` when none is recorded: it is then the first
        account seen there). ``StorageError`` when the database cannot say."""
        namespace = self.namespace(self_id)
        if namespace is None:
            assert self_id is not None  # namespace(None) is ""
            await self.adopt(store, self_id)
            namespace = self.namespace(self_id)
            assert namespace is not None
        return namespace
