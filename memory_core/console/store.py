"""The console's own SQL (migration 009): edits and deletions with their audit entries (one
transaction each), the recycle bin and the audit log. What it only reads of the dialogue and
distilled tables it asks their stores (``PgDialogueStore``, ``PgDistilledStore``).

Every query about a session names it (``session_key = $2``), so no change through one session
can touch another's rows. Rows leave as the core's frozen dataclasses (``MemoryTurn``,
``DistilledMemory``) or the small ones below.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import asyncpg
import numpy as np

from ..distill.memory import DistilledMemory
from ..distill.store import DISTILLED_COLUMNS, _distilled
from ..errors import StorageError
from ..models import MemoryTurn
from ..storage.dialogue_store import TURN_COLUMNS, _turn
from ..storage.pg import PgStore, rows_affected
from ..storage.scopes import scope_delete

# ----------------------------------------------------------------------------- edits

SQL_LOCK_TURN = (
    f"SELECT {TURN_COLUMNS} FROM dialogues WHERE id = $1 AND session_key = $2 FOR UPDATE"
)
SQL_EDIT_TURN = f"""
UPDATE dialogues SET content = $3, token_count = $4, embedding = $5::halfvec,
       embedding_model = $6, keywords = array_to_tsvector($7::text[]), text_form = $8
WHERE id = $1 AND session_key = $2
RETURNING {TURN_COLUMNS}
"""
SQL_LOCK_MEMORY = f"""
SELECT {DISTILLED_COLUMNS} FROM distilled_memories WHERE id = $1 AND session_key = $2 FOR UPDATE
"""
SQL_EDIT_MEMORY = f"""
UPDATE distilled_memories SET content = $3, content_hash = $4, embedding = $5::halfvec,
       embedding_model = $6, updated_at = now()
WHERE id = $1 AND session_key = $2
RETURNING {DISTILLED_COLUMNS}
"""

# ----------------------------------------------------------------------------- recycle bin

# Moves one row into the bin whole; nothing happens for a row of another session.
_TO_BIN = """
WITH gone AS (DELETE FROM {table} WHERE id = $1 AND session_key = $2 RETURNING *)
INSERT INTO memory_recycle_bin
    (kind, item_id, session_key, user_id, group_id, summary, row_data, deleted_by, purge_after)
SELECT '{kind}', id, session_key, user_id, group_id, left(content, 200), to_jsonb(gone), $3, $4
FROM gone
RETURNING id, summary
"""
SQL_TURN_TO_BIN = _TO_BIN.format(table="dialogues", kind="turn")
SQL_MEMORY_TO_BIN = _TO_BIN.format(table="distilled_memories", kind="distilled")

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
# The row goes back as it was, with its id (OVERRIDING SYSTEM VALUE: the identity column);
# a row binned before a column was added gets that column's default (``pinned``: 011).
_RESTORE = """
INSERT INTO {table} OVERRIDING SYSTEM VALUE
SELECT * FROM jsonb_populate_record(NULL::{table}, '{{"pinned": false}}'::jsonb || $1::jsonb)
"""
SQL_RESTORE_TURN = _RESTORE.format(table="dialogues")
SQL_RESTORE_MEMORY = _RESTORE.format(table="distilled_memories")
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

# ----------------------------------------------------------------------------- charts

SQL_METRICS_SINCE = """
SELECT day, metric, value FROM memory_daily_stats WHERE day >= $1 ORDER BY day, metric
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
class TurnEdit:
    """A turn's new text with everything derived from it."""

    content: str
    token_count: int
    embedding: np.ndarray | None
    embedding_model: str | None
    keywords: Sequence[str]
    text_form: int  # the form ``keywords`` and ``embedding`` were made in (lang.indexed)


@dataclass(frozen=True)
class MemoryEdit:
    content: str
    content_hash: str
    embedding: np.ndarray | None
    embedding_model: str | None


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


class PgConsoleStore(PgStore):
    """The console's queries; every read or change of a session's rows names that session."""

    async def _edit(
        self, lock: str, update: str, item_id: int, session_key: str, values: Sequence[Any],
        audit: Audit,
    ) -> tuple[asyncpg.Record, asyncpg.Record] | None:  # fmt: skip
        """Lock the session's row, update it with ``values``, log the text before and after;
        (before, after) as rows, or ``None`` if the session has no such row."""
        try:
            async with self._connection() as conn, conn.transaction():
                before = await conn.fetchrow(lock, item_id, session_key)
                if before is None:
                    return None
                after = await conn.fetchrow(update, item_id, session_key, *values)
                audit = dataclasses.replace(audit, before_text=before["content"])
                await conn.execute(SQL_AUDIT, *audit.values())
        except StorageError as exc:
            if isinstance(exc.__cause__, asyncpg.UniqueViolationError):
                raise ConsoleConflictError("这个会话已有一条内容相同的记忆") from exc
            raise
        assert after is not None  # the row is locked: the update found it
        return before, after

    async def edit_turn(
        self, turn_id: int, session_key: str, edit: TurnEdit, audit: Audit
    ) -> tuple[MemoryTurn, MemoryTurn] | None:
        """Replace a turn's text; (before, after), or ``None`` if the session has no such turn."""
        values = (edit.content, edit.token_count, edit.embedding, edit.embedding_model,
                  list(edit.keywords), edit.text_form)  # fmt: skip
        rows = await self._edit(SQL_LOCK_TURN, SQL_EDIT_TURN, turn_id, session_key, values, audit)
        return None if rows is None else (_turn(rows[0]), _turn(rows[1]))

    async def edit_memory(
        self, memory_id: int, session_key: str, edit: MemoryEdit, audit: Audit
    ) -> tuple[DistilledMemory, DistilledMemory] | None:
        """Replace a distilled memory's text; (before, after), or ``None`` if not found.
        ``ConsoleConflictError`` when another current memory of the session has that text."""
        values = (edit.content, edit.content_hash, edit.embedding, edit.embedding_model)
        rows = await self._edit(
            SQL_LOCK_MEMORY, SQL_EDIT_MEMORY, memory_id, session_key, values, audit
        )
        return None if rows is None else (_distilled(rows[0]), _distilled(rows[1]))

    async def move_to_bin(
        self, kind: str, item_id: int, session_key: str, purge_after: datetime, audit: Audit
    ) -> int | None:
        """Move a turn (``kind="turn"``) or distilled memory into the bin; its bin id, or
        ``None`` if the session has no such row."""
        sql = SQL_TURN_TO_BIN if kind == "turn" else SQL_MEMORY_TO_BIN
        async with self._connection() as conn, conn.transaction():
            binned = await conn.fetchrow(sql, item_id, session_key, audit.actor, purge_after)
            if binned is None:
                return None
            audit = dataclasses.replace(audit, before_text=binned["summary"])
            await conn.execute(SQL_AUDIT, *audit.values())
        return int(binned["id"])

    async def bin(self, session_key: str | None, limit: int) -> list[BinItem]:
        async with self._connection() as conn:
            rows = await conn.fetch(SQL_BIN, session_key, limit)
        return [_bin_item(r) for r in rows]

    async def restore(self, bin_id: int, actor: str) -> BinItem | None:
        """Put a binned row back as it was; ``None`` if the bin has no such item."""
        try:
            async with self._connection() as conn, conn.transaction():
                record = await conn.fetchrow(SQL_TAKE_FROM_BIN, bin_id)
                if record is None:
                    return None
                item = _bin_item(record)
                row = record["row_data"]
                sql = SQL_RESTORE_TURN if item.kind == "turn" else SQL_RESTORE_MEMORY
                await conn.execute(sql, row if isinstance(row, str) else json.dumps(row))
                await conn.execute(
                    SQL_AUDIT,
                    *Audit(
                        actor,
                        "restore",
                        item.kind,
                        item.item_id,
                        item.session_key,
                        after_text=item.summary,
                    ).values(),
                )
        except StorageError as exc:
            if isinstance(exc.__cause__, asyncpg.UniqueViolationError):
                raise ConsoleConflictError(
                    "无法恢复：同一会话里已有一条内容相同的当前记忆（或同一条消息）"
                ) from exc
            raise
        return item

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

    async def metrics_since(self, since: date) -> list[tuple[date, str, int]]:
        async with self._connection() as conn:
            rows = await conn.fetch(SQL_METRICS_SINCE, since)
        return [(r["day"], r["metric"], r["value"]) for r in rows]
