"""What forgetting does to the audit log (migration 009): a forgotten scope's entries lose
their texts.

The console (``console.store``) writes and reads the audit log: who changed what, when, and
the text before and after (a console edit, an MCP ``remember`` or ``recall``). Those texts are
the person's memories, so a /forget, /忘记我 or MCP forget of them must reach the log too; the
entries themselves stay, so the operator still sees that something was done, by whom and when.
The core does it for the reason it owns the recycle bin (``storage.recycle_bin``): forgetting
is the memory's lifecycle, and nothing the core is built from may import the console.

The log has no user or group column, only the session key (``models.generate_session_key``:
``[account/][group:]user``), so the scope's condition (``storage.scopes.scope_filter``) is
read against the ids in that key.
"""

from __future__ import annotations

from ..models import ForgetScope
from .pg import PgStore, rows_affected
from .scopes import scope_filter

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


class PgAuditTextStore(PgStore):
    """Clears the texts of the audit entries a /forget scope covers."""

    async def forget_scope(self, scope: ForgetScope) -> int:
        """Clear ``before_text`` and ``after_text`` of the entries of ``scope``'s sessions;
        how many entries lost a text."""
        where, args = scope_filter(scope)
        sql = (
            f"{_KEYED_ENTRIES}UPDATE memory_audit_log SET before_text = NULL, after_text = NULL "
            f"WHERE id IN (SELECT id FROM entries WHERE {where})"
        )
        async with self._connection() as conn:
            return rows_affected(await conn.execute(sql, *args))
