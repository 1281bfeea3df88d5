"""The dialogue table as the features that derive from turns use it: the evaluator scores
exchanges, distillation reads a session after its watermark and locks the turns it drew from."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from ..models import MemoryTurn
from ..storage.pg import PgStore
from .bad_rows import usable_turn
from .columns import SQL_TURNS_BY_ID, turn_from_record

# Distillation reads a session after its watermark by id, not time: the watermark is an id, and
# a turn spooled during an outage (stored later, with its original time) must still be read
# once. Turns already expired are skipped.
SQL_UNDISTILLED_TURNS = """
SELECT id, role, content, sender_name, created_at FROM dialogues
WHERE session_key = $1 AND id > $2 AND (expires_at IS NULL OR expires_at > $3)
ORDER BY id LIMIT $4
"""

# A turn the operator pinned keeps no expiry, whatever its score (migration 011).
SQL_SET_SCORE = """
UPDATE dialogues SET score = $3, expires_at = CASE WHEN pinned THEN NULL ELSE $4::timestamptz END
WHERE id = $1 OR id = $2
"""

# The turns a batch was distilled from, locked against deletion until the saving transaction
# ends (KEY SHARE: other updates of the turns, such as their embedding, are not held up).
SQL_LOCK_SOURCE_TURNS = """
SELECT count(*) FROM (
    SELECT 1 FROM dialogues WHERE id = ANY($1::bigint[]) FOR KEY SHARE
) AS kept
"""


@dataclass(frozen=True)
class SourceTurn:
    """A turn as the extraction reads it."""

    id: int
    role: str
    content: str
    sender_name: str | None
    created_at: datetime


class PgSourceStore(PgStore):
    """Turns as evaluation and distillation read, score and hold them."""

    async def turns_by_id(self, ids: Collection[int]) -> dict[int, MemoryTurn]:
        """Those of ``ids`` that are stored, by id."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_TURNS_BY_ID, list(ids))
        return {r["id"]: turn_from_record(r) for r in records if usable_turn(r)}

    async def set_score(
        self, turn_ids: tuple[int, int], score: int, expires_at: datetime | None
    ) -> None:
        """Score an evaluated exchange (its two turns) and give them the band's expiry."""
        async with self._connection() as conn:
            await conn.execute(SQL_SET_SCORE, *turn_ids, score, expires_at)

    async def undistilled_turns(
        self, session_key: str, after_id: int, now: datetime, limit: int
    ) -> list[SourceTurn]:
        """The session's live turns after ``after_id``, in id order (for distillation)."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_UNDISTILLED_TURNS, session_key, after_id, now, limit)
        return [
            SourceTurn(r["id"], r["role"], r["content"], r["sender_name"], r["created_at"])
            for r in records
            if usable_turn(r)
        ]

    async def keep_turns(self, turn_ids: Sequence[int]) -> bool:
        """Lock these turns against deletion until the caller's transaction ends; whether all
        of them are still there (a /forget or 撤回 arriving meanwhile waits for the end)."""
        wanted = sorted(set(turn_ids))
        if not wanted:
            return True
        async with self._connection() as conn:
            kept = await conn.fetchval(SQL_LOCK_SOURCE_TURNS, wanted)
        return bool(kept == len(wanted))
