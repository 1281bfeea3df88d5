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
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol

log = logging.getLogger(__name__)

# "" = the first account's (and the shared) namespace; "B/" = account B's.
_current: ContextVar[str] = ContextVar("memory_account", default="")


def key_account(alias: str = "") -> str:
    """SQL of the namespace of a row's session key (``""`` or ``"B/"``): what an account
    condition compares with a :func:`current` value. ``alias`` is a constant of the caller."""
    column = f"{alias}session_key"
    return f"substr({column}, 1, strpos({column}, '/'))"


def current() -> str:
    """The namespace of the call in progress (``""`` when none was set: the first account)."""
    return _current.get()


def account_of_key(session_key: str) -> str:
    """The namespace a stored session key is in (the inverse of ``generate_session_key``)."""
    head, slash, _ = session_key.partition("/")
    return f"{head}/" if slash else ""


@contextmanager
def serving(account: str) -> Iterator[None]:
    """Run the block in ``account``'s namespace (from :meth:`AccountBook.namespace`)."""
    token = _current.set(account)
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

    def namespace(self, self_id: int | None) -> str:
        """The namespace ``self_id`` reads and writes: ``""`` when shared, for the first
        account, and for a call without an account (CLI, MCP, console); else ``"{self_id}/"``.

        Before :meth:`adopt` named the first account every account maps to ``""``: the plugin
        adopts on each bot's connect, before that bot's first event."""
        if self.shared or self_id is None or self.first is None or self_id == self.first:
            return ""
        return f"{self_id}/"
