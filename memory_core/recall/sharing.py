"""Group-shared memory: whether a group's members recall each other's words.

Off by default. The operator lists groups shared from the start (``MEMORY_SHARED_GROUPS``); a
group's admins switch it either way (``/群共享 开|关``), and their choice, kept in PostgreSQL,
wins over the list. In a shared group a recall reads every member's turns of that group — what
each member said to the bot there and the bot's replies (and, with ``BOT_RECORD_UNADDRESSED``,
what was said in the group without addressing the bot) — never another group's or a private
chat's. What stays per member: the short-term context (but with CHAT_GROUP_WINDOW, off by
default, the group's last minutes are every member's window, shared or not: what every member
saw in the chat; ``conversation.preparation``), distilled facts, preferences and
summaries (they are written about "the user" and would be misread as the asker's), and cached
answers. Forgetting is unchanged: a member's rows leave the shared pool with them.

Recall asks on every group message, so the answer is kept for ``SHARED_STATE_TTL`` seconds
per group. A switch (``/群共享``) in this process takes effect at once; other bot processes on
the same database (``MEMORY_DSN`` shared by several QQ accounts) see it within
``SHARED_STATE_TTL`` seconds. ``status`` (what /群共享 shows) always reads the database.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Literal

from ..storage.database_handle import Database, Transaction
from ..storage.shared_groups import PgSharedGroupStore

SharingSource = Literal["setting", "command"]

SHARED_STATE_TTL = 5.0
"""Seconds a group's shared state is reused by recall (the staleness bound for a switch made
by another process on the same database)."""
_CACHED_GROUPS = 4096


@dataclass(frozen=True)
class SharingStatus:
    """Whether a group is shared and why: the operator's list (``setting``) or an admin's
    command (``command``, with who and when)."""

    shared: bool
    source: SharingSource
    changed_by: int | None = None
    changed_at: datetime | None = None


class GroupSharing:
    """Reads and switches the shared state of groups."""

    def __init__(
        self,
        *,
        listed: frozenset[int],
        database: Database,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._listed = listed
        self._database = database
        self._clock = clock
        # group id -> (read at, shared); the oldest read first.
        self._recent: OrderedDict[int, tuple[float, bool]] = OrderedDict()

    def _store(self, within: Transaction | None = None) -> PgSharedGroupStore:
        return (within or self._database).store(PgSharedGroupStore)

    async def status(self, group_id: int, *, within: Transaction | None = None) -> SharingStatus:
        """Read from the database, inside ``within`` if given (and kept for ``shared``)."""
        read_at = self._clock()
        choice = await self._store(within).choice(group_id)
        if choice is None:
            status = SharingStatus(group_id in self._listed, "setting")
        else:
            status = SharingStatus(choice.shared, "command", choice.changed_by, choice.changed_at)
        self._keep(group_id, status.shared, read_at)
        return status

    async def shared_groups(self) -> frozenset[int]:
        """Every group shared now: the operator's list, less and plus the admins' choices."""
        choices = await self._store().choices()
        listed = {g for g in self._listed if choices.get(g, True)}
        return frozenset(listed | {g for g, shared in choices.items() if shared})

    async def shared(self, group_id: int | None) -> bool:
        """Whether recall in this chat reads the whole group (never for a private chat); at
        most ``SHARED_STATE_TTL`` seconds old."""
        if group_id is None:
            return False
        kept = self._recent.get(group_id)
        if kept is not None and self._clock() - kept[0] < SHARED_STATE_TTL:
            return kept[1]
        return (await self.status(group_id)).shared

    def forget_kept(self, group_id: int) -> None:
        """Drop the state kept for ``shared``: the next call reads the database."""
        self._recent.pop(group_id, None)

    def _keep(self, group_id: int, shared: bool, read_at: float) -> None:
        kept = self._recent.get(group_id)
        if kept is not None and kept[0] > read_at:
            return  # a switch landed while this was being read: the switch is newer
        self._recent[group_id] = (read_at, shared)
        self._recent.move_to_end(group_id)
        if len(self._recent) > _CACHED_GROUPS:
            self._recent.popitem(last=False)

    async def switch(
        self,
        group_id: int,
        *,
        on: bool,
        by: int | None,
        now: datetime | None = None,
        within: Transaction | None = None,
    ) -> bool:
        """Share the group's memory among its members, or stop; whether that changed it.

        ``within``: the caller's transaction (the console writes its audit entry in it); the
        state kept for ``shared`` takes the switch at once, so a caller whose transaction rolls
        back calls ``forget_kept``."""
        before = await self.status(group_id, within=within)
        await self._store(within).choose(
            group_id, shared=on, changed_by=by, at=now or datetime.now(timezone.utc)
        )
        self._keep(group_id, on, self._clock())
        return before.shared != on
