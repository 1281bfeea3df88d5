"""The console's own tables (migration 009): the recycle bin and the audit log. The turns and
distilled memories it shows and changes belong to their stores (``dialogue.admin_store``,
``PgDistilledStore``); ``MemoryConsole`` runs a change and its audit entry in one transaction.

Every query about a session names it, so no change through one session can touch another's
rows. Rows leave as the small frozen dataclasses below.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from ..errors import StorageError
from ..models import MemoryTurn
from ..storage.pg import PgStore, rows_affected
from ..storage.row_changes import TakenRow
from ..storage.scopes import scope_delete

# ----------------------------------------------------------------------------- recycle bin

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

# ----------------------------------------------------------------------------- audit log

SQL_AUDIT = """
INSERT INTO memory_audit_log
    (actor, action, target_kind, target_id, session_key, before_text, after_text)
VALUES ($1, $2, $3, $4, $5, $6, $7)
"""
AUDIT_COLUMNS = (
    "id, at, actor, action, target_kind, target_id, session_key, before_text, after_text"
)
SQL_AUDIT_LOG = f"""
SELECT {AUDIT_COLUMNS} FROM memory_audit_log ORDER BY at DESC, id DESC LIMIT $1 OFFSET $2
"""


@dataclass(frozen=True)
class SessionRow:
    """One session in the list: who, where, how much, how recent."""

    session_key: str
    user_id: int
    group_id: int | None
    chat_type: str
    turns: int
    last_at: datetime
    name: str | None
    memories: int
    group_name: str | None = None


@dataclass(frozen=True)
class FoundTurn:
    """A turn in the browser; ``similarity`` when found by meaning."""

    turn: MemoryTurn
    similarity: float | None
    pinned: bool = False


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


@dataclass(frozen=True)
class AuditEntry:
    id: int
    at: datetime
    actor: str
    action: str
    target_kind: str
    target_id: int | None
    session_key: str | None
    before_text: str | None
    after_text: str | None


@dataclass(frozen=True)
class Audit:
    """What one change writes to the audit log."""

    actor: str
    action: str
    target_kind: str
    target_id: int | None
    session_key: str | None
    before_text: str | None = None
    after_text: str | None = None

    def values(self) -> tuple[Any, ...]:
        return (
            self.actor,
            self.action,
            self.target_kind,
            self.target_id,
            self.session_key,
            self.before_text,
            self.after_text,
        )


class ConsoleConflictError(StorageError):
    """A change would make two rows one: a restore of a row stored again meanwhile, or an
    edit giving a memory the text of another current memory of its session."""


def _bin_item(record: asyncpg.Record) -> BinItem:
    return BinItem(**{key: record[key] for key in BIN_COLUMNS.split(", ")})


@contextmanager
def conflicts_refused(message: str) -> Iterator[None]:
    """Turn a unique violation inside the block into ``ConsoleConflictError(message)``."""
    try:
        yield
    except StorageError as exc:
        if isinstance(exc.__cause__, asyncpg.UniqueViolationError):
            raise ConsoleConflictError(message) from exc
        raise


class PgConsoleStore(PgStore):
    """The recycle bin and the audit log; every read of a session's rows names that session.

    A change the console makes to a turn or a distilled memory runs in one transaction with
    its bin row and audit entry (``Database.transaction``): the rows' own stores change them,
    this store writes the rest.
    """

    async def to_bin(
        self, kind: str, taken: TakenRow, *, deleted_by: str, purge_after: datetime
    ) -> int:
        """Keep a row its store took out; the bin item's id."""
        async with self._connection() as conn:
            bin_id = await conn.fetchval(
                SQL_TO_BIN, kind, taken.item_id, taken.session_key, taken.user_id,
                taken.group_id, taken.summary, taken.row_data, deleted_by, purge_after,
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
            return rows_affected(await conn.execute(SQL_PURGE_BIN, before))

    async def delete_scope(self, **scope: Any) -> int:
        """Empty the bin of a /forget scope (see ``storage.scopes.scope_delete``)."""
        sql, args = scope_delete("memory_recycle_bin", **scope)
        async with self._connection() as conn:
            return rows_affected(await conn.execute(sql, *args))

    async def bin_size(self) -> int:
        async with self._connection() as conn:
            return int(await conn.fetchval(SQL_BIN_SIZE))

    async def audit_log(self, limit: int, offset: int) -> list[AuditEntry]:
        async with self._connection() as conn:
            rows = await conn.fetch(SQL_AUDIT_LOG, limit, offset)
        return [AuditEntry(**{key: r[key] for key in AUDIT_COLUMNS.split(", ")}) for r in rows]

    async def write_audit(self, audit: Audit) -> None:
        async with self._connection() as conn:
            await conn.execute(SQL_AUDIT, *audit.values())
