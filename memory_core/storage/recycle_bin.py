"""The recycle bin (migration 009): rows the console deleted, kept whole until restored or
purged. The core owns it because its lifecycle is the memory's: a /forget takes the scope's
copies too (``Forgetting.forget``) and the purge of expired rows empties what is due
(``TemporalMemory.purge_expired``); the console puts rows in and takes them out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from ..models import ForgetScope
from .database import BULK_TIMEOUT
from .pg import PgStore, rows_affected
from .row_changes import TakenRow
from .scopes import scope_delete

# A row its owner's store took out (``storage.row_changes``), kept whole until restored or purged.
SQL_TO_BIN = """
INSERT INTO memory_recycle_bin
    (kind, item_id, session_key, user_id, group_id, summary, row_data, deleted_by, purge_after)
VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, $9)
RETURNING id
"""
BIN_COLUMNS = (
    "id, kind, item_id, session_key, user_id, group_id, summary, deleted_at, deleted_by, "
    "purge_after"
)
SQL_BIN = f"""
SELECT {BIN_COLUMNS} FROM memory_recycle_bin
WHERE ($1::text IS NULL OR session_key = $1)
ORDER BY deleted_at DESC, id DESC LIMIT $2
"""
SQL_TAKE_FROM_BIN = f"""
DELETE FROM memory_recycle_bin WHERE id = $1 RETURNING {BIN_COLUMNS}, row_data
"""
SQL_PURGE_BIN = "DELETE FROM memory_recycle_bin WHERE purge_after <= $1"
SQL_BIN_SIZE = "SELECT count(*) FROM memory_recycle_bin"


@dataclass(frozen=True)
class BinItem:
    id: int
    kind: str
    item_id: int
    session_key: str
    user_id: int
    group_id: int | None
    summary: str
    deleted_at: datetime
    deleted_by: str
    purge_after: datetime


def _bin_item(record: asyncpg.Record) -> BinItem:
    return BinItem(**{key: record[key] for key in BIN_COLUMNS.split(", ")})


class PgRecycleBinStore(PgStore):
    """The recycle bin; every read of a session's items names that session."""

    async def to_bin(
        self, kind: str, taken: TakenRow, *, deleted_by: str, purge_after: datetime
    ) -> int:
        """Keep a row its store took out; the bin item's id."""
        async with self._connection() as conn:
            bin_id = await conn.fetchval(
                SQL_TO_BIN, kind, taken.item_id, taken.session_key, taken.user_id,
                taken.group_id, taken.summary, taken.row_data, deleted_by, purge_after,
                timeout=BULK_TIMEOUT,
            )  # fmt: skip
        return int(bin_id)

    async def take_from_bin(self, bin_id: int) -> tuple[BinItem, str] | None:
        """Remove an item from the bin: the item and its whole row (jsonb text) to put back."""
        async with self._connection() as conn:
            record = await conn.fetchrow(SQL_TAKE_FROM_BIN, bin_id)
        if record is None:
            return None
        row = record["row_data"]
        return _bin_item(record), row if isinstance(row, str) else json.dumps(row)

    async def bin(self, session_key: str | None, limit: int) -> list[BinItem]:
        async with self._connection() as conn:
            rows = await conn.fetch(SQL_BIN, session_key, limit)
        return [_bin_item(r) for r in rows]

    async def purge_bin(self, before: datetime) -> int:
        async with self._connection() as conn:
            return rows_affected(await conn.execute(SQL_PURGE_BIN, before, timeout=BULK_TIMEOUT))

    async def delete_scope(self, scope: ForgetScope) -> int:
        """Empty the bin of a /forget scope (see ``storage.scopes.scope_delete``)."""
        sql, args = scope_delete("memory_recycle_bin", scope)
        async with self._connection() as conn:
            return rows_affected(await conn.execute(sql, *args, timeout=BULK_TIMEOUT))

    async def bin_size(self) -> int:
        async with self._connection() as conn:
            return int(await conn.fetchval(SQL_BIN_SIZE, timeout=BULK_TIMEOUT))
