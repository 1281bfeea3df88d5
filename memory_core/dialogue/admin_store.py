"""The dialogue table as the console, the export and import, a person's own export and the
statistics read it."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import asyncpg

from ..accounts import current as current_account
from ..accounts import key_account
from ..models import MemoryTurn
from ..storage.database import BULK_TIMEOUT
from ..storage.row_changes import RowTaker, put_back_sql, take_sql
from ..time_bounds import EARLIEST, LATEST
from .bad_rows import usable_turn
from .columns import TURN_COLUMNS, turn_from_record

# Everything stored of one person, every chat, oldest first (/导出我的记忆).
SQL_USER_TURNS = f"""
SELECT {TURN_COLUMNS} FROM dialogues WHERE user_id = $1 AND {key_account()} = $2
ORDER BY created_at, id
"""

# Export (memory_core.transfer): one page of a set of sessions (NULL: all), in id order.
SQL_EXPORT_TURNS = f"""
SELECT {TURN_COLUMNS}, raw_segments::text AS raw_segments FROM dialogues
WHERE ($1::text[] IS NULL OR session_key = ANY($1::text[])) AND id > $2
ORDER BY id LIMIT $3
"""

SQL_IDS_BY_UUID = """
SELECT message_uuid, id FROM dialogues WHERE message_uuid = ANY($1::text[])
"""

SQL_UUIDS_BY_ID = "SELECT id, message_uuid FROM dialogues WHERE id = ANY($1::bigint[])"

# An imported turn keeps the retention its source gave it (score and expiry).
SQL_SET_RETENTION = """
UPDATE dialogues SET score = $2, expires_at = CASE WHEN pinned THEN NULL ELSE $3::timestamptz END
WHERE message_uuid = $1
"""

SQL_COUNT_PENDING = "SELECT count(*) FROM dialogues WHERE embedding IS NULL"

# /memstat's figures of one QQ account's memory ($1, memory_core.accounts); the size is the
# table's, every account's.
SQL_STATS = f"""
SELECT chat_type, role, count(*) AS n FROM dialogues WHERE {key_account()} = $1
GROUP BY chat_type, role
"""

# /memstat's summary of one QQ account's memory ($3). Rows with a time outside [$1, $2)
# (time_bounds; bad_rows says how one can exist) are counted apart and left out of the oldest
# and newest, which would show ±infinity otherwise.
_GOOD_TIMES = (
    "created_at >= $1 AND created_at < $2 AND coalesce(expires_at >= $1 AND expires_at < $2, true)"
)
SQL_STATS_SUMMARY = f"""
SELECT count(DISTINCT session_key) AS sessions,
       min(created_at) FILTER (WHERE {_GOOD_TIMES}) AS oldest,
       max(created_at) FILTER (WHERE {_GOOD_TIMES}) AS newest,
       count(*) FILTER (WHERE embedding IS NULL) AS pending,
       count(*) FILTER (WHERE expires_at IS NOT NULL AND expires_at <= now()) AS expired,
       count(*) FILTER (WHERE NOT ({_GOOD_TIMES})) AS bad_times,
       pg_total_relation_size('dialogues') AS bytes
FROM dialogues WHERE {key_account()} = $3
"""

# ----------------------------------------------------------------------------- the console
# The operator console's views of the turns. Every query about a session names it,
# so no view of one session can show another's rows.

# A session key without its QQ account's namespace ("B/", memory_core.accounts).
_BARE_KEY = "substr(session_key, strpos(session_key, '/') + 1)"

# Who and where, read back from a session key ("{user}" or "{group}:{user}", after "B/").
_SESSION_WHO = f"""
       substr({_BARE_KEY}, strpos({_BARE_KEY}, ':') + 1)::bigint AS user_id,
       CASE WHEN strpos(session_key, ':') > 0
            THEN split_part({_BARE_KEY}, ':', 1)::bigint END AS group_id,
       CASE WHEN strpos(session_key, ':') > 0 THEN 'group' ELSE 'private' END AS chat_type"""

# The sessions with turns (their summary rows, kept by triggers: migration 011) and the sessions
# $6 last active at $7 that hold none, most recently active first; $1 chat type, $2 group,
# $3 user, $8 session key (NULL: any). A few thousand short rows are read, never the turns.
SQL_SESSION_LIST = f"""
WITH listed AS (
    SELECT session_key, turns, last_at FROM dialogue_sessions
    UNION ALL
    SELECT e.session_key, 0, e.last_at
    FROM unnest($6::text[], $7::timestamptz[]) AS e(session_key, last_at)
    WHERE NOT EXISTS (SELECT 1 FROM dialogue_sessions s WHERE s.session_key = e.session_key)
),
who AS (SELECT listed.*, {_SESSION_WHO} FROM listed)
SELECT * FROM who
WHERE ($1::text IS NULL OR chat_type = $1) AND ($2::bigint IS NULL OR group_id = $2)
  AND ($3::bigint IS NULL OR user_id = $3) AND ($8::text IS NULL OR session_key = $8)
ORDER BY last_at DESC, session_key LIMIT $4 OFFSET $5
"""

# How many sessions the list above holds: those with turns and those of $1 without any.
SQL_SESSION_COUNT = """
SELECT (SELECT count(*) FROM dialogue_sessions)
     + (SELECT count(*) FROM unnest($1::text[]) AS e(session_key)
        WHERE NOT EXISTS (SELECT 1 FROM dialogue_sessions s WHERE s.session_key = e.session_key))
"""

SQL_SESSION_ACTIVITY = f"""
SELECT session_key, turns, last_at, {_SESSION_WHO} FROM dialogue_sessions WHERE session_key = $1
"""

# Each session's name: the sender name of its latest named user turn (the session index,
# backwards, one probe a session).
SQL_SESSION_NAMES = """
SELECT k.session_key, n.sender_name
FROM unnest($1::text[]) AS k(session_key)
CROSS JOIN LATERAL (
    SELECT d.sender_name FROM dialogues d
    WHERE d.session_key = k.session_key AND d.role = 'user' AND d.sender_name IS NOT NULL
    ORDER BY d.created_at DESC, d.id DESC LIMIT 1
) n
"""

# The groups with turns (from the session rows: one a group member).
SQL_GROUPS_WITH_TURNS = f"""
SELECT DISTINCT split_part({_BARE_KEY}, ':', 1)::bigint AS group_id FROM dialogue_sessions
WHERE strpos(session_key, ':') > 0 ORDER BY 1 LIMIT $1
"""

# Turns stored per local day since $1 ($2: the timezone), split by who spoke.
SQL_TURNS_PER_DAY = """
SELECT (created_at AT TIME ZONE $2)::date AS day,
       count(*) FILTER (WHERE role = 'user') AS user_turns,
       count(*) FILTER (WHERE role = 'assistant') AS bot_turns
FROM dialogues WHERE created_at >= $1
GROUP BY 1 ORDER BY 1
"""

_SESSION_TURNS_IN = """
SELECT {columns}, pinned FROM dialogues
WHERE session_key = $1
  AND created_at >= coalesce($2::timestamptz, '-infinity')
  AND created_at < coalesce($3::timestamptz, 'infinity') {matching}
ORDER BY created_at DESC, id DESC LIMIT $4 OFFSET $5
"""

# A page of a session's turns, newest first, in a time range [$2, $3) (NULL: open).
SQL_SESSION_TURNS = _SESSION_TURNS_IN.format(columns=TURN_COLUMNS, matching="")

# Those containing the case-folded text $6: found through the keyword index by terms $7
# (a tsquery every such turn's terms match; a turn not analysed yet is read too), then checked.
SQL_SESSION_TURNS_CONTAINING = _SESSION_TURNS_IN.format(
    columns=TURN_COLUMNS,
    matching="""
  AND (keywords @@ $7::tsquery OR keywords IS NULL)
  AND strpos(lower(normalize(content, NFKC)), $6) > 0""",
)

# Without such terms (one character, letters or digits that may sit inside a longer word)
# every turn of the session in the range is checked.
SQL_SESSION_TURNS_SCANNED = _SESSION_TURNS_IN.format(
    columns=TURN_COLUMNS, matching="\n  AND strpos(lower(normalize(content, NFKC)), $6) > 0"
)

SQL_SESSION_TURNS_BY_ID = f"""
SELECT {TURN_COLUMNS}, pinned FROM dialogues WHERE session_key = $1 AND id = ANY($2::bigint[])
ORDER BY created_at, id
"""

# Pinning keeps a turn: no expiry (the evaluator gives it none either); unpinning gives it $4.
SQL_PIN_TURN = """
UPDATE dialogues SET pinned = $3, expires_at = CASE WHEN $3 THEN NULL ELSE $4::timestamptz END
WHERE id = $1 AND session_key = $2
RETURNING content
"""

SQL_TAKE_TURN = take_sql("dialogues")

SQL_PUT_BACK_TURN = put_back_sql("dialogues")


@dataclass(frozen=True)
class ExportedTurn:
    """A stored turn with its raw OneBot segments, as an export carries it."""

    turn: MemoryTurn
    raw_segments: list[dict[str, Any]] | None


@dataclass(frozen=True)
class SessionActivity:
    """A session as the console lists it: who, where, how many turns, when last active."""

    session_key: str
    user_id: int
    group_id: int | None
    chat_type: str
    turns: int
    last_at: datetime


@dataclass(frozen=True)
class ShownTurn:
    """A turn as the console shows it: the turn, and whether the operator pinned it."""

    turn: MemoryTurn
    pinned: bool


@dataclass(frozen=True)
class TurnsShown:
    """Which of a session's turns the console lists (see ``session_turns``)."""

    start: datetime | None = None
    end: datetime | None = None
    containing: str | None = None  # case-folded text
    terms_query: str | None = None  # a tsquery every turn containing it matches
    limit: int = 50
    offset: int = 0


@dataclass(frozen=True)
class StoreStats:
    by_type_role: dict[tuple[str, str], int]
    sessions: int
    oldest: datetime | None
    newest: datetime | None
    pending_embeddings: int
    expired_not_purged: int
    total_bytes: int
    bad_times: int = 0  # rows left out of every read for a time outside the range (bad_rows)


def _activity(record: asyncpg.Record) -> SessionActivity:
    return SessionActivity(
        session_key=record["session_key"],
        user_id=record["user_id"],
        group_id=record["group_id"],
        chat_type=record["chat_type"],
        turns=record["turns"],
        last_at=record["last_at"],
    )


class PgAdminStore(RowTaker):
    """Export and import, a person's turns, the console's session views and edits, the
    statistics."""

    SQL_TAKE = SQL_TAKE_TURN
    SQL_PUT_BACK = SQL_PUT_BACK_TURN

    async def export_turns(
        self, session_keys: Sequence[str] | None, after_id: int, limit: int
    ) -> list[ExportedTurn]:
        """A page of the turns of these sessions (all when ``None``) after ``after_id``."""
        records = await self._sessions_page(SQL_EXPORT_TURNS, session_keys, after_id, limit)
        return [
            ExportedTurn(
                turn_from_record(r), json.loads(r["raw_segments"]) if r["raw_segments"] else None
            )
            for r in records
        ]

    async def ids_by_uuid(self, message_uuids: Sequence[str]) -> dict[str, int]:
        """The row ids of those of ``message_uuids`` that are stored."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_IDS_BY_UUID, list(message_uuids), timeout=BULK_TIMEOUT)
        return {r["message_uuid"]: r["id"] for r in records}

    async def uuids_by_id(self, ids: Collection[int]) -> dict[int, str]:
        """The message_uuid of those of ``ids`` that are stored (an export names turns so)."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_UUIDS_BY_ID, list(ids), timeout=BULK_TIMEOUT)
        return {r["id"]: r["message_uuid"] for r in records}

    async def set_retention(self, rows: Sequence[tuple[str, int | None, datetime | None]]) -> None:
        """Give turns (by message_uuid) their score and expiry."""
        if rows:
            async with self._transaction() as conn:
                await conn.executemany(SQL_SET_RETENTION, rows, timeout=BULK_TIMEOUT)

    async def user_turns(self, user_id: int) -> list[MemoryTurn]:
        """Every stored turn of ``user_id``'s sessions (theirs and the bot's replies)."""
        async with self._connection() as conn:
            records = await conn.fetch(
                SQL_USER_TURNS, user_id, current_account(), timeout=BULK_TIMEOUT
            )
        return [turn_from_record(r) for r in records if usable_turn(r)]

    async def count_pending_embeddings(self) -> int:
        async with self._connection() as conn:
            return int(await conn.fetchval(SQL_COUNT_PENDING, timeout=BULK_TIMEOUT))

    async def stats(self) -> StoreStats:
        async with self._connection() as conn:
            account = current_account()
            records = await conn.fetch(SQL_STATS, account, timeout=BULK_TIMEOUT)
            by = {(r["chat_type"], r["role"]): r["n"] for r in records}
            s = await conn.fetchrow(
                SQL_STATS_SUMMARY, EARLIEST, LATEST, account, timeout=BULK_TIMEOUT
            )
        assert s is not None  # an aggregate always returns a row
        return StoreStats(
            by_type_role=by,
            sessions=s["sessions"],
            oldest=s["oldest"],
            newest=s["newest"],
            pending_embeddings=s["pending"],
            expired_not_purged=s["expired"],
            total_bytes=s["bytes"],
            bad_times=s["bad_times"],
        )

    # ---------------------------------------------------------------- the console

    async def session_list(
        self,
        *,
        chat_type: str | None,
        group_id: int | None,
        user_id: int | None,
        limit: int,
        offset: int,
        without_turns: dict[str, datetime],
        session_key: str | None = None,
    ) -> list[SessionActivity]:
        """Sessions most recently active first (``session_key``: that one only);
        ``without_turns``: sessions (key -> last activity) listed too when they hold no turn
        (only distilled memories)."""
        keys = list(without_turns)
        async with self._connection() as conn:
            rows = await conn.fetch(
                SQL_SESSION_LIST, chat_type, group_id, user_id, limit, offset,
                keys, [without_turns[k] for k in keys], session_key, timeout=BULK_TIMEOUT,
            )  # fmt: skip
        return [_activity(r) for r in rows]

    async def session_count(self, without_turns: Sequence[str]) -> int:
        """How many sessions ``session_list`` would list in all (``without_turns`` as there)."""
        async with self._connection() as conn:
            return int(
                await conn.fetchval(SQL_SESSION_COUNT, list(without_turns), timeout=BULK_TIMEOUT)
            )

    async def session_activity(self, session_key: str) -> SessionActivity | None:
        async with self._connection() as conn:
            row = await conn.fetchrow(SQL_SESSION_ACTIVITY, session_key)
        return None if row is None else _activity(row)

    async def session_names(self, session_keys: Sequence[str]) -> dict[str, str]:
        """The latest sender name of each session that has one."""
        async with self._connection() as conn:
            rows = await conn.fetch(SQL_SESSION_NAMES, list(session_keys))
        return {r["session_key"]: r["sender_name"] for r in rows}

    async def session_turns(self, session_key: str, shown: TurnsShown) -> list[ShownTurn]:
        """A page of the session's turns, newest first."""
        args: list[Any] = [session_key, shown.start, shown.end, shown.limit, shown.offset]
        if shown.containing is None:
            sql = SQL_SESSION_TURNS
        elif shown.terms_query is None:
            sql, args = SQL_SESSION_TURNS_SCANNED, [*args, shown.containing]
        else:
            sql = SQL_SESSION_TURNS_CONTAINING
            args = [*args, shown.containing, shown.terms_query]
        async with self._connection() as conn:
            rows = await conn.fetch(sql, *args)
        return [ShownTurn(turn_from_record(r), r["pinned"]) for r in rows if usable_turn(r)]

    async def session_turns_by_ids(self, session_key: str, ids: Sequence[int]) -> list[ShownTurn]:
        """These turns, if they are the session's, oldest first."""
        async with self._connection() as conn:
            rows = await conn.fetch(SQL_SESSION_TURNS_BY_ID, session_key, list(ids))
        return [ShownTurn(turn_from_record(r), r["pinned"]) for r in rows if usable_turn(r)]

    async def pin_turn(
        self, session_key: str, turn_id: int, *, pinned: bool, expires_at: datetime | None
    ) -> str | None:
        """Pin a turn of this session (no expiry) or unpin it (``expires_at``); its text, or
        ``None`` if the session has no such turn."""
        async with self._connection() as conn:
            text = await conn.fetchval(SQL_PIN_TURN, turn_id, session_key, pinned, expires_at)
        return None if text is None else str(text)

    async def groups_with_turns(self, limit: int) -> list[int]:
        async with self._connection() as conn:
            return [
                r["group_id"]
                for r in await conn.fetch(SQL_GROUPS_WITH_TURNS, limit, timeout=BULK_TIMEOUT)
            ]

    async def turns_per_day(self, since: datetime, tz_name: str) -> list[tuple[date, int, int]]:
        """(local day, user turns, bot turns) of every day since ``since`` with turns."""
        async with self._connection() as conn:
            rows = await conn.fetch(SQL_TURNS_PER_DAY, since, tz_name, timeout=BULK_TIMEOUT)
        return [(r["day"], r["user_turns"], r["bot_turns"]) for r in rows]
