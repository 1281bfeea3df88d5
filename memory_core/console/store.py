"""The console's own table (migration 009): the audit log. The turns and distilled memories it
shows and changes belong to their stores (``dialogue.admin_store``, ``PgDistilledStore``), the
recycle bin to the core (``storage.recycle_bin``: /forget and the purge empty it too);
``MemoryConsole`` runs a change, its bin row and its audit entry in one transaction.

Every query about a session names it, so no change through one session can touch another's
rows. Rows leave as the small frozen dataclasses below.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from ..errors import StorageError
from ..models import MemoryTurn
from ..storage.pg import PgStore

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
    """The audit log. A change the console makes to a turn or a distilled memory runs in one
    transaction with its bin row and audit entry (``Database.transaction``): the rows' own
    stores change them, ``PgRecycleBinStore`` keeps the bin, this store writes the audit.
    """

    async def audit_log(self, limit: int, offset: int) -> list[AuditEntry]:
        async with self._connection() as conn:
            rows = await conn.fetch(SQL_AUDIT_LOG, limit, offset)
        return [AuditEntry(**{key: r[key] for key in AUDIT_COLUMNS.split(", ")}) for r in rows]

    async def write_audit(self, audit: Audit) -> None:
        async with self._connection() as conn:
            await conn.execute(SQL_AUDIT, *audit.values())
