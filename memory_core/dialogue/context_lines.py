"""The line a turn answers (``MEMORY_INDEX_CONTEXT``, ``lang.indexed``), by one rule wherever a
row is indexed: the latest turn of the *other* role in the same session, earlier in
``(created_at, id)`` order and at most ``CONTEXT_MAX_GAP`` before it. A group member's session
holds that member's turns and the bot's replies to them, so in a group too it is the line
between the two of them. Live turns read it with ``SQL_CONTEXT_BEFORE``, the backfills and
re-index walks with ``SQL_CONTEXT_LATERAL``, bulk inserts (``contexts_for``) from the rows around
them; migration 018 takes the index from rows whose line changes."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from ..lang.indexed import CONTEXT_MAX_GAP, ContextLine
from ..storage.database import BULK_TIMEOUT
from .columns import NewTurnRow

_GAP = f"interval '{int(CONTEXT_MAX_GAP.total_seconds())} seconds'"

# The line row ``d`` answers, as columns ctx_content and ctx_sender (NULL: none), for a query
# over ``dialogues d``.
SQL_CONTEXT_LATERAL = f"""
LEFT JOIN LATERAL (
    SELECT c.content AS ctx_content, c.sender_name AS ctx_sender FROM dialogues c
    WHERE c.session_key = d.session_key AND c.role <> d.role
      AND (c.created_at, c.id) < (d.created_at, d.id)
      AND c.created_at >= d.created_at - {_GAP}
    ORDER BY c.created_at DESC, c.id DESC LIMIT 1
) ctx ON true
"""

# The line a turn about to be stored answers: session $1, its time $2, its role $3 (every
# stored row at that time comes before it: the new row's id will be the largest).
SQL_CONTEXT_BEFORE = f"""
SELECT content, sender_name FROM dialogues
WHERE session_key = $1 AND role <> $3 AND created_at <= $2 AND created_at >= $2 - {_GAP}
ORDER BY created_at DESC, id DESC LIMIT 1
"""

# The stored rows that may be a bulk insert's lines: per session ($1), from the gap before its
# first new row ($2) to its last ($3).
SQL_SESSION_LINES = """
SELECT d.session_key, d.created_at, d.id, d.role, d.content, d.sender_name
FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[]) AS s(key, first, last)
JOIN dialogues d ON d.session_key = s.key AND d.created_at >= s.first AND d.created_at <= s.last
"""


def context_of(record: asyncpg.Record) -> ContextLine | None:
    """The line read by ``SQL_CONTEXT_LATERAL`` (or ``SQL_CONTEXT_BEFORE``) with a row."""
    content = record["ctx_content"]
    return None if content is None else ContextLine(content, record["ctx_sender"])


async def context_before(
    conn: PoolConnectionProxy[asyncpg.Record], row: NewTurnRow
) -> ContextLine | None:
    """The line the new ``row`` answers, from the stored turns."""
    record = await conn.fetchrow(SQL_CONTEXT_BEFORE, row.session_key, row.created_at, row.role)
    return None if record is None else ContextLine(record["content"], record["sender_name"])


class _Line(NamedTuple):
    created_at: datetime
    stored: int  # 0: a stored row (before any new one at the same time), 1: a new row
    order: int  # the stored row's id, or the new row's place in the insert
    role: str
    line: ContextLine


async def contexts_for(
    conn: PoolConnectionProxy[asyncpg.Record], rows: Sequence[NewTurnRow]
) -> list[ContextLine | None]:
    """The line each of ``rows`` (about to be inserted in this order) answers, among the
    stored turns and the rows themselves — what ``SQL_CONTEXT_LATERAL`` will read for them
    once they are stored (they get ids in this order, above every stored one)."""
    sessions: dict[str, list[int]] = defaultdict(list)
    for place, row in enumerate(rows):
        sessions[row.session_key].append(place)
    keys = list(sessions)
    firsts = [min(rows[p].created_at for p in sessions[k]) - CONTEXT_MAX_GAP for k in keys]
    lasts = [max(rows[p].created_at for p in sessions[k]) for k in keys]
    lines: dict[str, list[_Line]] = defaultdict(list)
    for r in await conn.fetch(SQL_SESSION_LINES, keys, firsts, lasts, timeout=BULK_TIMEOUT):
        line = ContextLine(r["content"], r["sender_name"])
        lines[r["session_key"]].append(_Line(r["created_at"], 0, r["id"], r["role"], line))
    for key, places in sessions.items():
        for p in places:
            row = rows[p]
            line = ContextLine(row.content, row.sender_name)
            lines[key].append(_Line(row.created_at, 1, p, row.role, line))
    found: list[ContextLine | None] = [None] * len(rows)
    for session in lines.values():
        latest: dict[str, _Line] = {}  # by role
        for entry in sorted(session, key=lambda e: (e.created_at, e.stored, e.order)):
            if entry.stored:
                before = next((e for role, e in latest.items() if role != entry.role), None)
                if before is not None and before.created_at >= entry.created_at - CONTEXT_MAX_GAP:
                    found[entry.order] = before.line
            latest[entry.role] = entry
    return found
