"""All SQL of the answer cache table (migrations 004, 005), behind ``PgAnswerCacheStore``.

A user's entry belongs to the chat it was cached in (``group_id``, NULL for the private chat)
and is read only there; public entries are read everywhere. Vector search here is exact
(``ORDER BY embedding <=> q`` over one chat's and the public entries): the set is small, and an
HNSW index would post-filter it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime

import numpy as np

from ..accounts import current as current_account
from ..models import ForgetScope
from ..storage.counters import bump_sql
from ..storage.database import BULK_TIMEOUT
from ..storage.pg import PgStore, rows_affected
from ..storage.scopes import scope_count, scope_delete

SQL_CACHE_UPSERT = """
INSERT INTO answer_cache (scope, user_id, group_id, question, question_norm, answer, source,
                          embedding, embedding_model, created_at, expires_at, account)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT (scope, account, coalesce(user_id, 0), coalesce(group_id, 0), question_norm)
DO UPDATE SET
    question = EXCLUDED.question, answer = EXCLUDED.answer,
    source = EXCLUDED.source, embedding = EXCLUDED.embedding,
    embedding_model = EXCLUDED.embedding_model, created_at = EXCLUDED.created_at,
    expires_at = EXCLUDED.expires_at, hits = 0
RETURNING id
"""

# This user's entry in this chat of this QQ account ($5, memory_core.accounts) first, else the
# public one (both read through the unique key's index; $2 is the group, 0 for the private chat).
SQL_CACHE_EXACT = """
SELECT id, scope, question, answer FROM answer_cache
WHERE question_norm = $3 AND (expires_at IS NULL OR expires_at > $4)
  AND ((scope = 'user' AND account = $5 AND coalesce(user_id, 0) = $1
        AND coalesce(group_id, 0) = $2)
       OR (scope = 'public' AND account = '' AND coalesce(user_id, 0) = 0
           AND coalesce(group_id, 0) = 0))
ORDER BY scope = 'user' DESC LIMIT 1
"""

SQL_CACHE_NEAREST = """
WITH candidates AS MATERIALIZED (
    SELECT id, scope, question, answer, embedding FROM answer_cache
    WHERE (scope = 'public' OR (user_id = $1 AND coalesce(group_id, 0) = $5 AND account = $6))
      AND embedding_model = $2 AND embedding IS NOT NULL
      AND (expires_at IS NULL OR expires_at > $3)
)
SELECT id, scope, question, answer, 1 - (embedding <=> $4) AS similarity
FROM candidates ORDER BY embedding <=> $4, id LIMIT 1
"""

# A hit is counted on the entry and in the daily counters in one round trip.
_COUNT_HIT = "WITH entry AS (UPDATE answer_cache SET hits = hits + 1 WHERE id = $1)"
SQL_CACHE_HIT = _COUNT_HIT + bump_sql("$2", "$3", "1")
SQL_CACHE_DROP_USER_SINCE = """
DELETE FROM answer_cache
WHERE scope = 'user' AND user_id = $1 AND created_at >= $2 AND account = $3
"""
# A person's entries in one chat ($2, 0 for the private chat) holding the case-folded text $3.
SQL_CACHE_DROP_USER_CONTAINING = """
DELETE FROM answer_cache
WHERE scope = 'user' AND user_id = $1 AND coalesce(group_id, 0) = $2 AND account = $4
  AND strpos(lower(normalize(question || E'\\n' || answer, NFKC)), $3) > 0
"""
SQL_CACHE_BY_USER = """
SELECT group_id, question, answer, created_at, expires_at FROM answer_cache
WHERE scope = 'user' AND user_id = $1 AND account = $2 ORDER BY created_at, id
"""
SQL_CACHE_PURGE = "DELETE FROM answer_cache WHERE expires_at IS NOT NULL AND expires_at <= $1"
SQL_CACHE_DROP_STALE_PRELOAD = """
DELETE FROM answer_cache WHERE source = 'preload' AND NOT (question_norm = ANY($1::text[]))
"""
SQL_CACHE_COUNTS = """
SELECT scope, count(*) AS n FROM answer_cache
WHERE expires_at IS NULL OR expires_at > $1 GROUP BY scope
"""
SQL_CACHE_NEEDING_REEMBED = """
SELECT id, question_norm FROM answer_cache
WHERE id > $2 AND (embedding_model IS DISTINCT FROM $1 OR embedding IS NULL)
ORDER BY id LIMIT $3
"""
SQL_CACHE_SET_EMBEDDING = """
UPDATE answer_cache SET embedding = $2, embedding_model = $3 WHERE id = $1
"""


@dataclass(frozen=True)
class CachedAnswer:
    """A cache entry found for a question; ``level`` says how it was found."""

    id: int
    scope: str
    question: str
    answer: str
    level: str = ""
    similarity: float = 1.0


@dataclass(frozen=True)
class OwnCachedAnswer:
    """A person's own cache entry, as exported to them."""

    group_id: int | None
    question: str
    answer: str
    created_at: datetime
    expires_at: datetime | None


class PgAnswerCacheStore(PgStore):
    """The semantic answer cache table."""

    async def upsert(
        self,
        *,
        scope: str,
        user_id: int | None,
        group_id: int | None,
        question: str,
        question_norm: str,
        answer: str,
        source: str,
        embedding: np.ndarray | None,
        model: str | None,
        now: datetime,
        expires_at: datetime | None,
    ) -> int:
        async with self._connection() as conn:
            return int(
                await conn.fetchval(
                    SQL_CACHE_UPSERT,
                    scope,
                    user_id,
                    group_id,
                    question,
                    question_norm,
                    answer,
                    source,
                    embedding,
                    model,
                    now,
                    expires_at,
                    current_account() if scope == "user" else "",
                )
            )

    async def exact(
        self, *, user_id: int, group_id: int | None, question_norm: str, now: datetime
    ) -> CachedAnswer | None:
        """This user's live entry for the question in this chat, else the public one."""
        async with self._connection() as conn:
            record = await conn.fetchrow(
                SQL_CACHE_EXACT, user_id, group_id or 0, question_norm, now, current_account()
            )
        if record is None:
            return None
        return CachedAnswer(record["id"], record["scope"], record["question"], record["answer"])

    async def nearest(
        self,
        *,
        user_id: int,
        group_id: int | None,
        model: str,
        vector: np.ndarray,
        now: datetime,
    ) -> CachedAnswer | None:
        """The live entry closest to ``vector``: public, or this user's in this chat."""
        async with self._connection() as conn:
            record = await conn.fetchrow(
                SQL_CACHE_NEAREST,
                user_id,
                model,
                now,
                vector,
                group_id or 0,
                current_account(),
            )
        if record is None:
            return None
        return CachedAnswer(
            record["id"],
            record["scope"],
            record["question"],
            record["answer"],
            similarity=float(record["similarity"]),
        )

    async def hit(self, entry_id: int, day: date, metric: str) -> None:
        """Count a hit on the entry and in the daily counter ``metric``."""
        async with self._connection() as conn:
            await conn.execute(SQL_CACHE_HIT, entry_id, day, metric)

    async def purge(self, now: datetime) -> int:
        async with self._connection() as conn:
            status = await conn.execute(SQL_CACHE_PURGE, now, timeout=BULK_TIMEOUT)
        return rows_affected(status)

    async def drop_stale_preload(self, kept_norms: Sequence[str]) -> int:
        async with self._connection() as conn:
            status = await conn.execute(
                SQL_CACHE_DROP_STALE_PRELOAD, list(kept_norms), timeout=BULK_TIMEOUT
            )
        return rows_affected(status)

    async def delete_scope(self, scope: ForgetScope) -> int:
        """Delete the per-user entries of a /forget scope (public entries are nobody's)."""
        sql, args = scope_delete(
            "answer_cache", scope, extra="scope = 'user'", account_of_row="account"
        )
        async with self._connection() as conn:
            status = await conn.execute(sql, *args, timeout=BULK_TIMEOUT)
        return rows_affected(status)

    async def count_scope(self, scope: ForgetScope) -> int:
        """How many entries ``delete_scope`` would delete now."""
        sql, args = scope_count(
            "answer_cache", scope, extra="scope = 'user'", account_of_row="account"
        )
        async with self._connection() as conn:
            return int(await conn.fetchval(sql, *args, timeout=BULK_TIMEOUT))

    async def delete_user_since(self, user_id: int, since: datetime) -> int:
        """Delete the user's own entries cached at or after ``since`` (any of them may repeat
        something the user has since recalled)."""
        async with self._connection() as conn:
            status = await conn.execute(
                SQL_CACHE_DROP_USER_SINCE, user_id, since, current_account(), timeout=BULK_TIMEOUT
            )
        return rows_affected(status)

    async def delete_user_containing(self, user_id: int, group_id: int | None, text: str) -> int:
        """Delete the user's own entries of this chat whose question or answer holds ``text``
        (case-folded, as ``lang.keywords.normalize`` gives it)."""
        async with self._connection() as conn:
            status = await conn.execute(
                SQL_CACHE_DROP_USER_CONTAINING,
                user_id,
                group_id or 0,
                text,
                current_account(),
                timeout=BULK_TIMEOUT,
            )
        return rows_affected(status)

    async def by_user(self, user_id: int) -> list[OwnCachedAnswer]:
        """The user's own entries, oldest first (public entries are nobody's)."""
        async with self._connection() as conn:
            records = await conn.fetch(
                SQL_CACHE_BY_USER, user_id, current_account(), timeout=BULK_TIMEOUT
            )
        return [
            OwnCachedAnswer(
                group_id=r["group_id"],
                question=r["question"],
                answer=r["answer"],
                created_at=r["created_at"],
                expires_at=r["expires_at"],
            )
            for r in records
        ]

    async def counts(self, now: datetime) -> dict[str, int]:
        async with self._connection() as conn:
            return {
                r["scope"]: r["n"]
                for r in await conn.fetch(SQL_CACHE_COUNTS, now, timeout=BULK_TIMEOUT)
            }

    async def rows_needing_reembed(
        self, model: str, after_id: int, limit: int
    ) -> list[tuple[int, str]]:
        async with self._connection() as conn:
            records = await conn.fetch(
                SQL_CACHE_NEEDING_REEMBED, model, after_id, limit, timeout=BULK_TIMEOUT
            )
        return [(r["id"], r["question_norm"]) for r in records]

    async def set_embeddings(self, ids: Sequence[int], vectors: np.ndarray, model: str) -> None:
        await self._write_embeddings(SQL_CACHE_SET_EMBEDDING, ids, vectors, model)
