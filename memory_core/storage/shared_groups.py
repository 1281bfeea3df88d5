"""All SQL of ``memory_shared_groups`` (migration 010): a group admin's choice to share the
group's memory among its members (``recall.sharing`` combines it with the operator's list)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from .pg import PgStore

SQL_CHOICE = "SELECT shared, changed_by, changed_at FROM memory_shared_groups WHERE group_id = $1"
SQL_CHOICES = "SELECT group_id, shared FROM memory_shared_groups"
SQL_CHOOSE = """
INSERT INTO memory_shared_groups (group_id, shared, changed_by, changed_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (group_id) DO UPDATE
SET shared = EXCLUDED.shared, changed_by = EXCLUDED.changed_by, changed_at = EXCLUDED.changed_at
"""


@dataclass(frozen=True)
class SharingChoice:
    """What a group admin chose for one group, who, and when."""

    shared: bool
    changed_by: int | None
    changed_at: datetime


class PgSharedGroupStore(PgStore):
    """The shared-groups table."""

    async def choice(self, group_id: int) -> SharingChoice | None:
        async with self._connection() as conn:
            r = await conn.fetchrow(SQL_CHOICE, group_id)
        return None if r is None else SharingChoice(r["shared"], r["changed_by"], r["changed_at"])

    async def choices(self) -> dict[int, bool]:
        """Every group an admin has switched, and whether it is shared now."""
        async with self._connection() as conn:
            return {r["group_id"]: r["shared"] for r in await conn.fetch(SQL_CHOICES)}

    async def choose(
        self, group_id: int, *, shared: bool, changed_by: int | None, at: datetime
    ) -> None:
        async with self._connection() as conn:
            await conn.execute(SQL_CHOOSE, group_id, shared, changed_by, at)
