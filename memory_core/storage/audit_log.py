"""The audit log (migration 009): who changed what, when, and the text before and after; and
what forgetting does to it (a forgotten scope's entries lose their texts).

The console and the MCP tools write and read it (a console edit, an MCP ``remember`` or
``recall``). Its texts are the person's memories, so a /forget, /忘记我 or MCP forget of them
must reach the log too; the entries themselves stay, so the operator still sees that something
was done, by whom and when. The core owns the table for the reason it owns the recycle bin
(``storage.recycle_bin``): forgetting is the memory's lifecycle, and nothing the core is built
from may import the console.

A single item forgotten (a 撤回, a /忘记 <编号>, a console delete into the recycle bin) clears
the entries about that turn or memory (``forget_items``): what was forgotten stays only where
it can still be restored from, the bin.

The log has no user or group column, only the session key (``models.generate_session_key``:
``[account/][group:]user``), so the scope's condition (``storage.scopes.scope_filter``) is
read against the ids in that key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..models import ForgetScope
from .database import BULK_TIMEOUT
from .pg import PgStore, rows_affected
from .scopes import scope_filter

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
# The entries about these turns ($1) and distilled memories ($2): an edit's texts, a pin's, an
# MCP note's. The log is the operator's and agents' changes, small beside the dialogue: a scan.
SQL_FORGET_ITEMS = """
UPDATE memory_audit_log SET before_text = NULL, after_text = NULL
WHERE (before_text IS NOT NULL OR after_text IS NOT NULL)
  AND ((target_kind = 'turn' AND target_id = ANY($1::bigint[]))
       OR (target_kind = 'distilled' AND target_id = ANY($2::bigint[])))
"""


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


# The entries that still hold a text, with the user and group of their session key; entries
# without a session key (a group's switch) hold no one's memory.
_KEYED_ENTRIES = """
WITH keyed AS (
    SELECT id, session_key, substr(session_key, strpos(session_key, '/') + 1) AS chat
    FROM memory_audit_log
    WHERE (before_text IS NOT NULL OR after_text IS NOT NULL)
      AND session_key ~ '^([0-9]+/)?([0-9]+:)?[0-9]+$'
), entries AS (
    SELECT id, session_key,
           (CASE WHEN strpos(chat, ':') > 0 THEN split_part(chat, ':', 2) ELSE chat END)::bigint
               AS user_id,
           (CASE WHEN strpos(chat, ':') > 0 THEN split_part(chat, ':', 1) END)::bigint
               AS group_id
    FROM keyed
)
"""


class PgAuditLogStore(PgStore):
    """The audit log. A change the console makes to a turn or a distilled memory runs in one
    transaction with its bin row and audit entry (``Database.transaction``): the rows' own
    stores change them, ``PgRecycleBinStore`` keeps the bin, this store writes the audit; a
    /forget clears the texts of the entries its scope covers.
    """

    async def audit_log(self, limit: int, offset: int) -> list[AuditEntry]:
        async with self._connection() as conn:
            rows = await conn.fetch(SQL_AUDIT_LOG, limit, offset)
        return [AuditEntry(**{key: r[key] for key in AUDIT_COLUMNS.split(", ")}) for r in rows]

    async def write_audit(self, audit: Audit) -> None:
        async with self._connection() as conn:
            await conn.execute(SQL_AUDIT, *audit.values())

    async def forget_items(self, *, turns: Sequence[int] = (), memories: Sequence[int] = ()) -> int:
        """Clear the texts of the entries about these turns and distilled memories (a 撤回, a
        /忘记 <编号>, a console delete: one item forgotten, not a whole scope); how many
        entries lost a text."""
        if not turns and not memories:
            return 0
        async with self._connection() as conn:
            return rows_affected(await conn.execute(SQL_FORGET_ITEMS, list(turns), list(memories)))

    async def forget_scope(self, scope: ForgetScope) -> int:
        """Clear ``before_text`` and ``after_text`` of the entries of ``scope``'s sessions;
        how many entries lost a text."""
        where, args = scope_filter(scope)
        sql = (
            f"{_KEYED_ENTRIES}UPDATE memory_audit_log SET before_text = NULL, after_text = NULL "
            f"WHERE id IN (SELECT id FROM entries WHERE {where})"
        )
        async with self._connection() as conn:
            # Forgetting grows with the log: the bulk statements' timeout.
            return rows_affected(await conn.execute(sql, *args, timeout=BULK_TIMEOUT))
