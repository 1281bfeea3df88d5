"""Group-shared memory: whether a group's members recall each other's words.

Off by default. The operator lists groups shared from the start (``MEMORY_SHARED_GROUPS``); a
group's admins switch it either way (``/群共享 开|关``), and their choice, kept in PostgreSQL,
wins over the list. In a shared group a recall reads every member's turns of that group — what
each member said to the bot there and the bot's replies (and, with ``BOT_RECORD_UNADDRESSED``,
what was said in the group without addressing the bot) — never another group's or a private
chat's. What stays per member: the short-term context, distilled facts, preferences and
summaries (they are written about "the user" and would be misread as the asker's), and cached
answers. Forgetting is unchanged: a member's rows leave the shared pool with them.

The state is read from the database at every recall (one primary-key lookup), so a switch
takes effect at once for every bot process on the database.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from ..errors import DatabaseUnavailableError
from ..storage.shared_groups import PgSharedGroupStore

SharingSource = Literal["setting", "command"]


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

    def __init__(self, *, listed: frozenset[int], pool: Callable[[], Any]) -> None:
        self._listed = listed
        self._pool = pool

    def _store(self) -> PgSharedGroupStore:
        pool = self._pool()
        if pool is None:
            raise DatabaseUnavailableError("the memory database is not connected")
        return PgSharedGroupStore(pool=pool)

    async def status(self, group_id: int) -> SharingStatus:
        choice = await self._store().choice(group_id)
        if choice is None:
            return SharingStatus(group_id in self._listed, "setting")
        return SharingStatus(choice.shared, "command", choice.changed_by, choice.changed_at)

    async def shared(self, group_id: int | None) -> bool:
        """Whether recall in this chat reads the whole group (never for a private chat)."""
        return group_id is not None and (await self.status(group_id)).shared

    async def switch(
        self, group_id: int, *, on: bool, by: int | None, now: datetime | None = None
    ) -> bool:
        """Share the group's memory among its members, or stop; whether that changed it."""
        before = await self.status(group_id)
        await self._store().choose(
            group_id, shared=on, changed_by=by, at=now or datetime.now(timezone.utc)
        )
        return before.shared != on
