"""All SQL of distilled memory and extraction bookkeeping (migration 004).

Rows leave as frozen dataclasses (``DistilledMemory``, ``SessionDue``); the turns a batch is
distilled from are read and locked through their own store (``PgSourceStore``). Vector search
here is exact (``ORDER BY embedding <=> q`` over a session's or a user's rows, read through ordinary
indexes): those sets are small, and an HNSW index would post-filter them (a filtered HNSW scan
can return fewer than k rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import numpy as np

from ..accounts import current as current_account
from ..accounts import key_account
from ..models import ForgetScope
from ..storage.database import BULK_TIMEOUT
from ..storage.pg import rows_affected
from ..storage.row_changes import RowTaker, edit_sql, put_back_sql, take_sql
from ..storage.scopes import scope_count, scope_delete
from .memory import DistilledKind, DistilledMemory, ExtractedMemory, content_hash

DISTILLED_COLUMNS = (
    "id, kind, session_key, user_id, group_id, content, category, confidence, strength, "
    "evidence, key_topics, sentiment, action_items, source_turn_ids, first_seen, "
    "last_confirmed, times_mentioned, importance, access_count, last_accessed_at, valid_until, "
    "superseded_by, created_at, embedding_model"
)


def _importance(base: str, accesses: str, mentions: str) -> str:
    """The one importance formula: the extraction's base value,
    raised by use (+0.02 an access, up to 10) and by repetition (+0.05 a repeat, up to 4)."""
    return f"least(1.0, {base} + 0.02 * least({accesses}, 10) + 0.05 * least({mentions} - 1, 4))"


# Arrays merged in first-seen order without repeats; evidence is capped at 10 items.
_UNION_TURNS = "ARRAY(SELECT DISTINCT t FROM unnest({a} || {b}) AS t ORDER BY t)"
_UNION_TEXT = (
    "ARRAY(SELECT e FROM unnest({a} || {b}) WITH ORDINALITY AS x(e, n) "
    "GROUP BY e ORDER BY min(n) LIMIT 10)"
)

# Insert, or confirm the current row with the same normalised content (exact duplicate).
SQL_UPSERT_DISTILLED = f"""
INSERT INTO distilled_memories AS d (
    kind, session_key, user_id, group_id, content, content_hash, category, confidence, strength,
    evidence, key_topics, sentiment, action_items, source_turn_ids, first_seen, last_confirmed,
    base_importance, importance, embedding, embedding_model)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $15, $16, $16, $17, $18)
ON CONFLICT (session_key, kind, content_hash) WHERE valid_until IS NULL DO UPDATE SET
    times_mentioned = d.times_mentioned + 1,
    last_confirmed = greatest(d.last_confirmed, EXCLUDED.last_confirmed),
    source_turn_ids = {_UNION_TURNS.format(a="d.source_turn_ids", b="EXCLUDED.source_turn_ids")},
    evidence = {_UNION_TEXT.format(a="d.evidence", b="EXCLUDED.evidence")},
    confidence = greatest(d.confidence, EXCLUDED.confidence),
    strength = greatest(d.strength, EXCLUDED.strength),
    base_importance = greatest(d.base_importance, EXCLUDED.base_importance),
    importance = {
    _importance(
        "greatest(d.base_importance, EXCLUDED.base_importance)",
        "d.access_count",
        "d.times_mentioned + 1",
    )
},
    updated_at = now()
RETURNING {DISTILLED_COLUMNS}, (xmax = 0) AS inserted
"""

# Confirm a current row (a restatement or near-duplicate of it was extracted again).
SQL_CONFIRM = f"""
UPDATE distilled_memories SET
    times_mentioned = times_mentioned + 1,
    last_confirmed = greatest(last_confirmed, $2),
    source_turn_ids = {_UNION_TURNS.format(a="source_turn_ids", b="$3::bigint[]")},
    evidence = {_UNION_TEXT.format(a="evidence", b="$4::text[]")},
    confidence = greatest(confidence, $5),
    strength = greatest(strength, $6),
    base_importance = greatest(base_importance, $7),
    importance = {
    _importance("greatest(base_importance, $7)", "access_count", "times_mentioned + 1")
},
    updated_at = now()
WHERE id = $1 AND user_id = $8 AND valid_until IS NULL
RETURNING {DISTILLED_COLUMNS}
"""

# The old memories stop being true when the new one was stated; only one user's rows.
SQL_SUPERSEDE = """
UPDATE distilled_memories SET valid_until = $2, superseded_by = $3, updated_at = now()
WHERE id = ANY($1::bigint[]) AND id <> $3 AND user_id = $4 AND valid_until IS NULL
"""

# Rows visible to a scope: the session ($2), or every chat of the user ($3; NULL = session only)
# in the session's QQ account's memory (memory_core.accounts).
_SCOPE = (
    "kind = $1 AND (session_key = $2 OR (user_id = $3::bigint"
    f" AND {key_account()} = substr($2::text, 1, strpos($2::text, '/'))))"
)
_CURRENT_AT = "first_seen <= $4 AND (valid_until IS NULL OR valid_until > $4)"

SQL_NEAREST = f"""
WITH candidates AS MATERIALIZED (
    SELECT {DISTILLED_COLUMNS}, embedding FROM distilled_memories
    WHERE {_SCOPE} AND {_CURRENT_AT} AND embedding_model = $5 AND embedding IS NOT NULL
)
SELECT {DISTILLED_COLUMNS}, 1 - (embedding <=> $6) AS similarity
FROM candidates ORDER BY embedding <=> $6, id LIMIT $7
"""

SQL_BY_KIND = f"""
SELECT {DISTILLED_COLUMNS} FROM distilled_memories
WHERE {_SCOPE} AND first_seen <= $4 AND ($5 OR valid_until IS NULL OR valid_until > $4)
ORDER BY CASE WHEN $6 THEN importance END DESC NULLS LAST, last_confirmed DESC, id DESC
LIMIT $7
"""

SQL_BY_IDS = f"SELECT {DISTILLED_COLUMNS} FROM distilled_memories WHERE id = ANY($1::bigint[])"

SQL_TOUCH = f"""
UPDATE distilled_memories SET access_count = access_count + 1,
    last_accessed_at = greatest(last_accessed_at, $2),
    importance = {_importance("base_importance", "access_count + 1", "times_mentioned")}
WHERE id = ANY($1::bigint[])
"""

_FORMULA = _importance("base_importance", "access_count", "times_mentioned")
SQL_REFRESH_IMPORTANCE = f"""
UPDATE distilled_memories SET importance = {_FORMULA}
WHERE importance IS DISTINCT FROM {_FORMULA}
"""

# Pairs of current facts/preferences of one session closer than $2 (maintenance).
SQL_DUPLICATE_PAIRS = """
SELECT a.id AS keep_id, b.id AS drop_id, a.content AS keep_content, b.content AS drop_content
FROM distilled_memories a
JOIN distilled_memories b ON b.session_key = a.session_key AND b.kind = a.kind AND b.id > a.id
WHERE a.kind IN ('facts', 'preferences') AND a.valid_until IS NULL AND b.valid_until IS NULL
  AND NOT b.pinned  -- a memory the operator pinned is never merged away
  AND a.embedding_model = $1 AND b.embedding_model = $1
  AND 1 - (a.embedding <=> b.embedding) >= $2
ORDER BY a.id, b.id
"""

SQL_MERGE_INTO = f"""
UPDATE distilled_memories k SET
    times_mentioned = k.times_mentioned + d.times_mentioned,
    first_seen = least(k.first_seen, d.first_seen),
    last_confirmed = greatest(k.last_confirmed, d.last_confirmed),
    source_turn_ids = {_UNION_TURNS.format(a="k.source_turn_ids", b="d.source_turn_ids")},
    evidence = {_UNION_TEXT.format(a="k.evidence", b="d.evidence")},
    confidence = greatest(k.confidence, d.confidence),
    strength = greatest(k.strength, d.strength),
    base_importance = greatest(k.base_importance, d.base_importance),
    access_count = k.access_count + d.access_count,
    importance = {
    _importance(
        "greatest(k.base_importance, d.base_importance)",
        "k.access_count + d.access_count",
        "k.times_mentioned + d.times_mentioned",
    )
},
    updated_at = now()
FROM distilled_memories d
WHERE k.id = $1 AND d.id = $2 AND k.valid_until IS NULL AND d.valid_until IS NULL
"""
SQL_REPOINT_HISTORY = "UPDATE distilled_memories SET superseded_by = $1 WHERE superseded_by = $2"
SQL_DELETE_DISTILLED = "DELETE FROM distilled_memories WHERE id = $1"

SQL_PENDING_DISTILLED_EMBEDDINGS = """
SELECT id, kind, content, key_topics FROM distilled_memories
WHERE embedding IS NULL ORDER BY id LIMIT $1
"""
SQL_DISTILLED_NEEDING_REEMBED = """
SELECT id, kind, content, key_topics FROM distilled_memories
WHERE id > $2 AND (embedding_model IS DISTINCT FROM $1 OR embedding IS NULL)
ORDER BY id LIMIT $3
"""
SQL_SET_DISTILLED_EMBEDDING = """
UPDATE distilled_memories SET embedding = $2, embedding_model = $3 WHERE id = $1
"""

# /memstat's counts, of one QQ account's memory ($1, memory_core.accounts; NULL: every
# account's, the console's overview).
SQL_DISTILLED_COUNTS = f"""
SELECT kind, count(*) FILTER (WHERE valid_until IS NULL) AS current,
       count(*) FILTER (WHERE valid_until IS NOT NULL) AS history
FROM distilled_memories WHERE $1::text IS NULL OR {key_account()} = $1 GROUP BY kind
"""

# ------------------------------------------------------------------ extraction bookkeeping

SQL_NOTE_EXCHANGE = """
INSERT INTO distilled_sessions (session_key, user_id, group_id, pending_turns, last_activity_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (session_key) DO UPDATE SET
    pending_turns = distilled_sessions.pending_turns + EXCLUDED.pending_turns,
    last_activity_at = greatest(distilled_sessions.last_activity_at, EXCLUDED.last_activity_at)
RETURNING pending_turns
"""

# Claims due sessions for one worker: sessions another process is claiming are skipped, and
# claimed ones are leased (not due again for $5, unless finished, postponed or deferred
# first), so two bots on one database never distil the same session at once. "Now" is the
# database's clock ($1 NULL), shared by every bot on it (as the evaluation queue's claims).
SQL_CLAIM_DUE_SESSIONS = """
WITH due AS (
    SELECT session_key FROM distilled_sessions
    WHERE pending_turns > 0 AND not_before <= coalesce($1::timestamptz, now())
      AND (pending_turns >= $2
           OR last_activity_at <= coalesce($1::timestamptz, now()) - $3::interval)
    ORDER BY last_activity_at, session_key LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE distilled_sessions s SET not_before = coalesce($1::timestamptz, now()) + $5::interval
FROM due WHERE s.session_key = due.session_key
RETURNING s.session_key, s.user_id, s.group_id, s.last_turn_id, s.pending_turns, s.attempts,
          s.last_activity_at
"""
SESSION_LEASE = timedelta(minutes=10)

SQL_SESSION_STATE = """
SELECT session_key, user_id, group_id, last_turn_id, pending_turns, attempts
FROM distilled_sessions WHERE session_key = $1
"""

SQL_FINISH_SESSION = """
UPDATE distilled_sessions SET
    last_turn_id = greatest(last_turn_id, $2),
    pending_turns = CASE WHEN $3 THEN greatest(pending_turns, $4)
                         ELSE greatest(pending_turns - $5, 0) END,
    last_extracted_at = $6, attempts = 0, not_before = '-infinity'
WHERE session_key = $1
"""

SQL_DRAWN_FROM = f"""
SELECT {DISTILLED_COLUMNS} FROM distilled_memories WHERE source_turn_ids && $1::bigint[]
"""
SQL_DELETE_FROM_SOURCES = """
DELETE FROM distilled_memories WHERE source_turn_ids && $1::bigint[] RETURNING id, kind
"""
# A person deleting their own memories (/忘记 3): only their rows in that session.
SQL_DELETE_OWN = """
DELETE FROM distilled_memories
WHERE id = ANY($1::bigint[]) AND user_id = $2 AND session_key = $3
RETURNING id, kind
"""
# What a person names for deletion in one session ($1, $2): these ids ($3), and every row,
# history included, whose text, evidence, topics or action items hold the case-folded text $4.
SQL_OWN_NAMED = f"""
SELECT {DISTILLED_COLUMNS} FROM distilled_memories
WHERE session_key = $1 AND user_id = $2
  AND (id = ANY($3::bigint[])
       OR ($4::text IS NOT NULL AND strpos(lower(normalize(concat_ws(E'\\n', content,
               array_to_string(evidence, E'\\n'), array_to_string(key_topics, E'\\n'),
               array_to_string(action_items, E'\\n')), NFKC)), $4) > 0))
ORDER BY (valid_until IS NULL) DESC, last_confirmed DESC, id DESC
"""
SQL_BY_USER = f"""
SELECT {DISTILLED_COLUMNS} FROM distilled_memories WHERE user_id = $1 AND {key_account()} = $2
ORDER BY created_at, id
"""
# Export (memory_core.transfer): a page of a set of sessions' memories (NULL: all), history
# included (the exporter names their source turns through the dialogue store).
SQL_EXPORT_DISTILLED = f"""
SELECT {DISTILLED_COLUMNS}, base_importance FROM distilled_memories
WHERE ($1::text[] IS NULL OR session_key = ANY($1::text[])) AND id > $2
ORDER BY id LIMIT $3
"""
# Import: a row as exported, unless the same memory (session, kind, text, first seen) is
# there already, or a current row with the same text.
SQL_IMPORT_DISTILLED = """
INSERT INTO distilled_memories (
    kind, session_key, user_id, group_id, content, content_hash, category, confidence, strength,
    evidence, key_topics, sentiment, action_items, source_turn_ids, first_seen, last_confirmed,
    times_mentioned, base_importance, importance, access_count, last_accessed_at, valid_until,
    created_at)
SELECT $1, $2, $3::bigint, $4::bigint, $5, $6, $7, $8::double precision, $9::double precision,
       $10::text[], $11::text[], $12, $13::text[], $14::bigint[], $15::timestamptz,
       $16::timestamptz, $17::integer, $18::double precision, $19::double precision,
       $20::integer, $21::timestamptz, $22::timestamptz, $23::timestamptz
WHERE NOT EXISTS (
    SELECT 1 FROM distilled_memories
    WHERE session_key = $2 AND kind = $1 AND content_hash = $6 AND first_seen = $15
)
ON CONFLICT (session_key, kind, content_hash) WHERE valid_until IS NULL DO NOTHING
RETURNING id
"""
SQL_MATCHING_DISTILLED = """
SELECT id FROM distilled_memories
WHERE session_key = $1 AND kind = $2 AND content_hash = $3
  AND (first_seen = $4 OR (valid_until IS NULL AND $5))
ORDER BY (first_seen = $4) DESC, id LIMIT 1
"""
SQL_SET_SUPERSEDED_BY = """
UPDATE distilled_memories SET superseded_by = $2 WHERE id = $1 AND superseded_by IS NULL
"""
SQL_DEFER_SESSION = "UPDATE distilled_sessions SET not_before = $2 WHERE session_key = $1"
SQL_POSTPONE_SESSION = """
UPDATE distilled_sessions SET attempts = attempts + 1, not_before = $2 WHERE session_key = $1
"""

SQL_COUNT_WAITING_SESSIONS = "SELECT count(*) FROM distilled_sessions WHERE pending_turns > 0"

# ----------------------------------------------------------------------------- the console
# The operator console's views of distilled memories.

# Every session holding memories: when one was last confirmed in its chat, and its count of
# current memories.
SQL_MEMORY_SESSIONS = """
SELECT session_key, max(last_confirmed) AS last_at,
       count(*) FILTER (WHERE valid_until IS NULL) AS current
FROM distilled_memories GROUP BY session_key
"""
# A session's memories: current ones first, then history; $2 a case-folded text (NULL: any).
SQL_SESSION_MEMORIES = f"""
SELECT {DISTILLED_COLUMNS}, pinned FROM distilled_memories
WHERE session_key = $1 AND ($2::text IS NULL OR strpos(lower(normalize(content, NFKC)), $2) > 0)
ORDER BY (valid_until IS NULL) DESC, kind, last_confirmed DESC, id DESC LIMIT $3
"""
SQL_PIN_MEMORY = """
UPDATE distilled_memories SET pinned = $3, updated_at = now()
WHERE id = $1 AND session_key = $2
RETURNING content
"""
# The console's edit (its text before goes to the audit log).
SQL_EDIT_MEMORY = edit_sql(
    "distilled_memories",
    "content = $3, content_hash = $4, embedding = $5::halfvec, embedding_model = $6, "
    "updated_at = now()",
    DISTILLED_COLUMNS,
)
SQL_TAKE_MEMORY = take_sql("distilled_memories")
SQL_PUT_BACK_MEMORY = put_back_sql("distilled_memories")


def _distilled(record: asyncpg.Record) -> DistilledMemory:
    return DistilledMemory(
        id=record["id"],
        kind=record["kind"],
        session_key=record["session_key"],
        user_id=record["user_id"],
        group_id=record["group_id"],
        content=record["content"],
        category=record["category"],
        confidence=record["confidence"],
        strength=record["strength"],
        evidence=tuple(record["evidence"]),
        key_topics=tuple(record["key_topics"]),
        sentiment=record["sentiment"],
        action_items=tuple(record["action_items"]),
        source_turn_ids=tuple(record["source_turn_ids"]),
        first_seen=record["first_seen"],
        last_confirmed=record["last_confirmed"],
        times_mentioned=record["times_mentioned"],
        importance=float(record["importance"]),
        access_count=record["access_count"],
        last_accessed_at=record["last_accessed_at"],
        valid_until=record["valid_until"],
        superseded_by=record["superseded_by"],
        created_at=record["created_at"],
        embedding_model=record["embedding_model"],
    )


@dataclass(frozen=True)
class MemoryEdit:
    """A distilled memory's new text with what is derived from it."""

    content: str
    content_hash: str
    embedding: np.ndarray | None
    embedding_model: str | None

    def values(self) -> tuple[Any, ...]:
        return (self.content, self.content_hash, self.embedding, self.embedding_model)


@dataclass(frozen=True)
class MemorySessionStats:
    """A session as the distilled table knows it (see ``SQL_MEMORY_SESSIONS``)."""

    last_at: datetime
    current: int


@dataclass(frozen=True)
class NewDistilled:
    """A distilled row ready to insert (see ``SQL_UPSERT_DISTILLED``)."""

    item: ExtractedMemory
    session_key: str
    user_id: int
    group_id: int | None
    content_hash: str
    source_turn_ids: tuple[int, ...]
    stated_at: datetime
    embedding: np.ndarray | None
    embedding_model: str | None

    def values(self) -> tuple[Any, ...]:
        item = self.item
        return (
            item.kind,
            self.session_key,
            self.user_id,
            self.group_id,
            item.content,
            self.content_hash,
            item.category,
            item.score if item.kind == "facts" else None,
            item.score if item.kind == "preferences" else None,
            list(item.evidence),
            list(item.key_topics),
            item.sentiment,
            list(item.action_items),
            list(self.source_turn_ids),
            self.stated_at,
            item.score,
            self.embedding,
            self.embedding_model,
        )


@dataclass(frozen=True)
class PortableMemory:
    """A distilled memory as an export carries it: the row, its base importance (before use
    raised it) and its source turns by message_uuid."""

    memory: DistilledMemory
    base_importance: float
    source_uuids: tuple[str, ...]


@dataclass(frozen=True)
class SessionDue:
    """A session's extraction state (a row of ``distilled_sessions``)."""

    session_key: str
    user_id: int
    group_id: int | None
    last_turn_id: int
    pending_turns: int
    attempts: int


def _session(record: asyncpg.Record) -> SessionDue:
    return SessionDue(
        record["session_key"],
        record["user_id"],
        record["group_id"],
        record["last_turn_id"],
        record["pending_turns"],
        record["attempts"],
    )


class PgDistilledStore(RowTaker):
    """Distilled memories, extraction bookkeeping and the daily counters they bump."""

    SQL_TAKE = SQL_TAKE_MEMORY
    SQL_PUT_BACK = SQL_PUT_BACK_MEMORY

    # ---------------------------------------------------------------- writing

    async def upsert(self, row: NewDistilled) -> tuple[DistilledMemory, bool]:
        """Insert, or confirm the current row with the same content; ``(row, inserted)``."""
        async with self._connection() as conn:
            record = await conn.fetchrow(SQL_UPSERT_DISTILLED, *row.values())
        assert record is not None  # INSERT … ON CONFLICT DO UPDATE always returns the row
        return _distilled(record), bool(record["inserted"])

    async def confirm(self, memory_id: int, row: NewDistilled) -> DistilledMemory | None:
        """Count ``row`` as another mention of the current memory ``memory_id`` (of the same
        user); ``None`` if there is no such memory."""
        item = row.item
        async with self._connection() as conn:
            record = await conn.fetchrow(
                SQL_CONFIRM,
                memory_id,
                row.stated_at,
                list(row.source_turn_ids),
                list(item.evidence),
                item.score if item.kind == "facts" else None,
                item.score if item.kind == "preferences" else None,
                item.score,
                row.user_id,
            )
        return _distilled(record) if record is not None else None

    async def supersede(
        self, old_ids: Sequence[int], *, new_id: int, user_id: int, at: datetime
    ) -> int:
        """Make ``old_ids`` history: no longer true from ``at``, replaced by ``new_id``."""
        if not old_ids:
            return 0
        async with self._connection() as conn:
            status = await conn.execute(SQL_SUPERSEDE, list(old_ids), at, new_id, user_id)
        return rows_affected(status)

    async def touch(self, ids: Sequence[int], now: datetime) -> None:
        """Count one use of each memory (raises its importance, see ``_importance``)."""
        if ids:
            async with self._connection() as conn:
                await conn.execute(SQL_TOUCH, list(ids), now)

    # ---------------------------------------------------------------- reading

    async def nearest(
        self,
        *,
        kind: DistilledKind,
        session_key: str,
        user_id: int | None,
        now: datetime,
        model: str,
        vector: np.ndarray,
        limit: int,
    ) -> list[tuple[DistilledMemory, float]]:
        """The current memories of a scope closest to ``vector``, with their cosine."""
        async with self._connection() as conn:
            records = await conn.fetch(
                SQL_NEAREST, kind, session_key, user_id, now, model, vector, limit
            )
        return [(_distilled(r), float(r["similarity"])) for r in records]

    async def by_kind(
        self,
        *,
        kind: DistilledKind,
        session_key: str,
        user_id: int | None,
        now: datetime,
        limit: int,
        by_importance: bool = False,
        include_history: bool = False,
    ) -> list[DistilledMemory]:
        """A scope's memories of one kind: latest confirmed first (or most important first)."""
        async with self._connection() as conn:
            records = await conn.fetch(
                SQL_BY_KIND,
                kind,
                session_key,
                user_id,
                now,
                include_history,
                by_importance,
                limit,
            )
        return [_distilled(r) for r in records]

    async def by_ids(self, ids: Sequence[int]) -> list[DistilledMemory]:
        async with self._connection() as conn:
            records = await conn.fetch(SQL_BY_IDS, list(ids))
        return [_distilled(r) for r in records]

    # ---------------------------------------------------------------- maintenance

    async def refresh_importance(self) -> int:
        async with self._connection() as conn:
            status = await conn.execute(SQL_REFRESH_IMPORTANCE, timeout=BULK_TIMEOUT)
        return rows_affected(status)

    async def duplicate_pairs(
        self, model: str, threshold: float
    ) -> list[tuple[int, int, str, str]]:
        """``(keep_id, drop_id, keep_content, drop_content)`` of close current pairs."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_DUPLICATE_PAIRS, model, threshold, timeout=BULK_TIMEOUT)
        return [(r["keep_id"], r["drop_id"], r["keep_content"], r["drop_content"]) for r in records]

    async def merge(self, keep_id: int, drop_id: int) -> bool:
        """Fold ``drop_id`` into ``keep_id`` (mentions, sources, evidence) and delete it."""
        async with self._transaction() as conn:
            status = await conn.execute(SQL_MERGE_INTO, keep_id, drop_id)
            if status.split()[-1] == "0":
                return False  # one of them was merged or superseded meanwhile
            await conn.execute(SQL_REPOINT_HISTORY, keep_id, drop_id)
            await conn.execute(SQL_DELETE_DISTILLED, drop_id)
        return True

    async def pending_embeddings(self, limit: int) -> list[tuple[int, str, str, list[str]]]:
        async with self._connection() as conn:
            records = await conn.fetch(
                SQL_PENDING_DISTILLED_EMBEDDINGS, limit, timeout=BULK_TIMEOUT
            )
        return [(r["id"], r["kind"], r["content"], list(r["key_topics"])) for r in records]

    async def rows_needing_reembed(
        self, model: str, after_id: int, limit: int
    ) -> list[tuple[int, str, str, list[str]]]:
        async with self._connection() as conn:
            records = await conn.fetch(
                SQL_DISTILLED_NEEDING_REEMBED, model, after_id, limit, timeout=BULK_TIMEOUT
            )
        return [(r["id"], r["kind"], r["content"], list(r["key_topics"])) for r in records]

    async def set_embeddings(self, ids: Sequence[int], vectors: np.ndarray, model: str) -> None:
        await self._write_embeddings(SQL_SET_DISTILLED_EMBEDDING, ids, vectors, model)

    async def delete_scope(self, scope: ForgetScope) -> dict[str, int]:
        """Delete a /forget scope's distilled memories and extraction bookkeeping; returns the
        memories deleted by kind (history rows included)."""
        memories, args = scope_delete("distilled_memories", scope)
        sessions, _ = scope_delete("distilled_sessions", scope)
        async with self._transaction() as conn:
            kinds = [
                r["kind"]
                for r in await conn.fetch(memories + " RETURNING kind", *args, timeout=BULK_TIMEOUT)
            ]
            await conn.execute(sessions, *args, timeout=BULK_TIMEOUT)
        return {kind: kinds.count(kind) for kind in set(kinds)}

    async def count_scope(self, scope: ForgetScope) -> dict[str, int]:
        """How many memories ``delete_scope`` would delete now, by kind."""
        sql, args = scope_count("distilled_memories", scope, by="kind")
        async with self._connection() as conn:
            return {
                r["kind"]: int(r["count"])
                for r in await conn.fetch(sql, *args, timeout=BULK_TIMEOUT)
            }

    async def delete_from_sources(self, turn_ids: Sequence[int]) -> dict[str, list[int]]:
        """Delete every distilled memory drawn from any of these turns (history included);
        returns the ids that went, by kind."""
        async with self._connection() as conn:
            records = await conn.fetch(
                SQL_DELETE_FROM_SOURCES, list(turn_ids), timeout=BULK_TIMEOUT
            )
        return _ids_by_kind(records)

    async def drawn_from(self, turn_ids: Sequence[int]) -> list[DistilledMemory]:
        """Every memory drawn from any of these turns (what ``delete_from_sources`` takes)."""
        if not turn_ids:
            return []
        async with self._connection() as conn:
            records = await conn.fetch(SQL_DRAWN_FROM, list(turn_ids), timeout=BULK_TIMEOUT)
        return [_distilled(r) for r in records]

    async def delete_own(
        self, ids: Sequence[int], *, user_id: int, session_key: str
    ) -> dict[str, list[int]]:
        """Delete these memories if they are ``user_id``'s in ``session_key``; returns the
        ids that went, by kind."""
        async with self._connection() as conn:
            records = await conn.fetch(
                SQL_DELETE_OWN, list(ids), user_id, session_key, timeout=BULK_TIMEOUT
            )
        return _ids_by_kind(records)

    async def own_named(
        self, *, user_id: int, session_key: str, ids: Sequence[int], containing: str | None
    ) -> list[DistilledMemory]:
        """``user_id``'s rows in ``session_key`` with these ids or holding the case-folded text
        ``containing`` anywhere (``SQL_OWN_NAMED``); current ones first."""
        async with self._connection() as conn:
            records = await conn.fetch(
                SQL_OWN_NAMED, session_key, user_id, list(ids), containing, timeout=BULK_TIMEOUT
            )
        return [_distilled(r) for r in records]

    async def by_user(self, user_id: int) -> list[DistilledMemory]:
        """Every distilled memory about ``user_id``, every chat, history included."""
        async with self._connection() as conn:
            records = await conn.fetch(
                SQL_BY_USER, user_id, current_account(), timeout=BULK_TIMEOUT
            )
        return [_distilled(r) for r in records]

    async def export_page(
        self, session_keys: Sequence[str] | None, after_id: int, limit: int
    ) -> list[tuple[DistilledMemory, float]]:
        """A page of the memories of these sessions (all when ``None``) after ``after_id``,
        each with its base importance (before use raised it)."""
        records = await self._sessions_page(SQL_EXPORT_DISTILLED, session_keys, after_id, limit)
        return [(_distilled(r), float(r["base_importance"])) for r in records]

    async def import_memory(
        self, row: PortableMemory, source_turn_ids: Sequence[int]
    ) -> tuple[int, bool]:
        """Store an exported memory (with its sources mapped to this database's turn ids);
        ``(id, inserted)`` — the id of the matching row when it was there already."""
        m = row.memory
        digest = content_hash(m.content)
        async with self._connection() as conn:
            new_id = await conn.fetchval(
                SQL_IMPORT_DISTILLED,
                m.kind, m.session_key, m.user_id, m.group_id, m.content, digest, m.category,
                m.confidence, m.strength, list(m.evidence), list(m.key_topics), m.sentiment,
                list(m.action_items), list(source_turn_ids), m.first_seen, m.last_confirmed,
                m.times_mentioned, row.base_importance, m.importance, m.access_count,
                m.last_accessed_at, m.valid_until, m.created_at, timeout=BULK_TIMEOUT,
            )  # fmt: skip
            if new_id is not None:
                return int(new_id), True
            found = await conn.fetchval(
                SQL_MATCHING_DISTILLED,
                m.session_key,
                m.kind,
                digest,
                m.first_seen,
                m.valid_until is None,
                timeout=BULK_TIMEOUT,
            )
        return (int(found) if found is not None else 0), False

    async def link_superseded(self, pairs: Sequence[tuple[int, int]]) -> None:
        """Point history rows at their successors: ``(old id, new id)`` pairs."""
        if pairs:
            async with self._transaction() as conn:
                await conn.executemany(SQL_SET_SUPERSEDED_BY, pairs)

    async def counts(self, *, every_account: bool = False) -> dict[str, tuple[int, int]]:
        """``{kind: (current, history)}`` of the call's QQ account's memory, or of all."""
        account = None if every_account else current_account()
        async with self._connection() as conn:
            records = await conn.fetch(SQL_DISTILLED_COUNTS, account, timeout=BULK_TIMEOUT)
        return {r["kind"]: (r["current"], r["history"]) for r in records}

    # ---------------------------------------------------------------- extraction bookkeeping

    async def note_exchange(
        self, session_key: str, user_id: int, group_id: int | None, now: datetime, turns: int = 1
    ) -> int:
        """Count ``turns`` new exchanges of a session; returns how many wait for extraction."""
        async with self._connection() as conn:
            return int(
                await conn.fetchval(SQL_NOTE_EXCHANGE, session_key, user_id, group_id, turns, now)
            )

    async def claim_due_sessions(
        self, *, now: datetime | None, every: int, idle: timedelta, limit: int
    ) -> list[SessionDue]:
        """Sessions due at ``now`` (``None``: the database's clock) — ``every`` exchanges
        noted, or ``idle`` that long —, claimed for this worker (``SQL_CLAIM_DUE_SESSIONS``),
        oldest first."""
        async with self._connection() as conn:
            records = await conn.fetch(
                SQL_CLAIM_DUE_SESSIONS, now, every, idle, limit, SESSION_LEASE
            )
        ordered = sorted(records, key=lambda r: (r["last_activity_at"], r["session_key"]))
        return [_session(r) for r in ordered]

    async def session_state(self, session_key: str) -> SessionDue | None:
        async with self._connection() as conn:
            record = await conn.fetchrow(SQL_SESSION_STATE, session_key)
        return _session(record) if record is not None else None

    async def finish_session(
        self,
        session_key: str,
        *,
        last_turn_id: int,
        taken: int,
        more: bool,
        every: int,
        now: datetime,
    ) -> None:
        """Move the watermark; ``more``: turns remain beyond it, so the session stays due."""
        async with self._connection() as conn:
            await conn.execute(
                SQL_FINISH_SESSION, session_key, last_turn_id, more, every, taken, now
            )

    async def defer_session(self, session_key: str, not_before: datetime) -> None:
        """Make a due session wait until ``not_before`` (no failed attempt is counted)."""
        async with self._connection() as conn:
            await conn.execute(SQL_DEFER_SESSION, session_key, not_before)

    async def postpone_session(self, session_key: str, not_before: datetime) -> None:
        async with self._connection() as conn:
            await conn.execute(SQL_POSTPONE_SESSION, session_key, not_before)

    async def waiting_sessions(self) -> int:
        async with self._connection() as conn:
            return int(await conn.fetchval(SQL_COUNT_WAITING_SESSIONS))

    # ---------------------------------------------------------------- the console

    async def memory_sessions(self) -> dict[str, MemorySessionStats]:
        """Every session holding distilled memories (history included)."""
        async with self._connection() as conn:
            rows = await conn.fetch(SQL_MEMORY_SESSIONS, timeout=BULK_TIMEOUT)
        return {r["session_key"]: MemorySessionStats(r["last_at"], r["current"]) for r in rows}

    async def session_memories(
        self, session_key: str, *, containing: str | None, limit: int
    ) -> list[tuple[DistilledMemory, bool]]:
        """The session's memories (current first, then history) and whether each is pinned;
        ``containing``: a case-folded text they must contain."""
        async with self._connection() as conn:
            rows = await conn.fetch(SQL_SESSION_MEMORIES, session_key, containing, limit)
        return [(_distilled(r), r["pinned"]) for r in rows]

    async def pin_memory(self, session_key: str, memory_id: int, *, pinned: bool) -> str | None:
        """Pin or unpin a memory of this session; its text, or ``None`` if there is none."""
        async with self._connection() as conn:
            text = await conn.fetchval(SQL_PIN_MEMORY, memory_id, session_key, pinned)
        return None if text is None else str(text)

    async def edit_memory(
        self, session_key: str, memory_id: int, edit: MemoryEdit
    ) -> tuple[str, DistilledMemory] | None:
        """Replace a memory's text and embedding; (text before, memory after), or ``None`` if
        the session has no such memory."""
        async with self._connection() as conn:
            record = await conn.fetchrow(SQL_EDIT_MEMORY, memory_id, session_key, *edit.values())
        return None if record is None else (record["before_text"], _distilled(record))


def _ids_by_kind(records: Sequence[asyncpg.Record]) -> dict[str, list[int]]:
    """Deleted rows' ids by kind (what a forget counts, and clears from the audit log)."""
    found: dict[str, list[int]] = {}
    for r in records:
        found.setdefault(r["kind"], []).append(r["id"])
    return found
