"""The dialogue table as its upkeep uses it: the columns derived from a turn's text filled in
later (embeddings, keywords, time references) or again (re-embed, re-index), the purge of
expired turns, and the memory's metadata (``memory_meta``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg
import numpy as np

from ..lang.indexed import IndexTexts, index_texts
from ..storage.database import BULK_TIMEOUT
from ..storage.pg import PgStore, rows_affected
from .columns import INDEX_BUILD_TIMEOUT
from .context_lines import SQL_CONTEXT_LATERAL, context_of

# The rows' indexed text is made in Python (lang.indexed) from these columns and the line each
# answers (context_lines, used when the form says so).
_INDEX_SOURCE = "d.id, d.content, d.sender_name, d.text_form, ctx.ctx_content, ctx.ctx_sender"
_FROM = f"dialogues d {SQL_CONTEXT_LATERAL}"

SQL_PENDING_EMBEDDINGS = f"""
SELECT {_INDEX_SOURCE} FROM {_FROM} WHERE d.embedding IS NULL ORDER BY d.id LIMIT $1
"""

# Rows to embed again: another model, no embedding yet, or another text form than $2.
_NEEDING_REINDEX = (
    "(d.embedding_model IS DISTINCT FROM $1 OR d.embedding IS NULL OR d.text_form <> $2)"
)

SQL_NEEDING_REEMBED = f"""
SELECT {_INDEX_SOURCE} FROM {_FROM} WHERE d.id > $3 AND {_NEEDING_REINDEX}
ORDER BY d.id LIMIT $4
"""

SQL_COUNT_NEEDING_REEMBED = f"SELECT count(*) FROM dialogues d WHERE {_NEEDING_REINDEX}"

SQL_SET_EMBEDDING = """
UPDATE dialogues SET embedding = $2, embedding_model = $3 WHERE id = $1
"""

# Rows whose embedding and keywords were made from another text form than $1 (a change of
# MEMORY_INDEX_SPEAKER, or rows from before migration 007), walked by id from $2.
SQL_OTHER_TEXT_FORM = f"""
SELECT {_INDEX_SOURCE} FROM {_FROM} WHERE d.id > $2 AND d.text_form <> $1 ORDER BY d.id LIMIT $3
"""

SQL_COUNT_OTHER_TEXT_FORM = "SELECT count(*) FROM dialogues WHERE text_form <> $1"

# Embedding, keywords and form change together, so a row is never half in one form.
SQL_SET_INDEXED = """
UPDATE dialogues
SET embedding = $2, embedding_model = $3, keywords = array_to_tsvector($4::text[]),
    text_form = $5
WHERE id = $1
"""

# The keyword backfill (rows from before migration 003, or after a change of the analyser).
SQL_PENDING_KEYWORDS = f"""
SELECT {_INDEX_SOURCE} FROM {_FROM} WHERE d.keywords IS NULL ORDER BY d.id LIMIT $1
"""

SQL_SET_KEYWORDS = """
UPDATE dialogues SET keywords = array_to_tsvector($2::text[]) WHERE id = $1
"""

SQL_RESET_KEYWORDS = "UPDATE dialogues SET keywords = NULL WHERE keywords IS NOT NULL"

# The time-reference backfill (rows from before migration 008), in id order from a resume point.
SQL_WITHOUT_TIME_REFERENCE = """
SELECT id, content, created_at FROM dialogues
WHERE id > $1 AND refers_start IS NULL ORDER BY id LIMIT $2
"""

SQL_COUNT_WITHOUT_TIME_REFERENCE = """
SELECT count(*) FROM dialogues WHERE id > $1 AND refers_start IS NULL
"""

SQL_SET_TIME_REFERENCE = "UPDATE dialogues SET refers_start = $2, refers_end = $3 WHERE id = $1"

SQL_ANY_EMBEDDED = "SELECT EXISTS (SELECT 1 FROM dialogues WHERE embedding IS NOT NULL)"

SQL_META_GET = "SELECT key, value FROM memory_meta"

SQL_META_SET = """
INSERT INTO memory_meta (key, value) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value
"""

# The QQ account that owns the unprefixed namespace (``memory_core.accounts``): claimed once,
# by the first account ever to connect; every later claim reads it.
SQL_CLAIM_FIRST_ACCOUNT = """
INSERT INTO memory_meta (key, value) VALUES ('first_account', $1::text)
ON CONFLICT (key) DO NOTHING RETURNING value
"""
SQL_FIRST_ACCOUNT = "SELECT value FROM memory_meta WHERE key = 'first_account'"

SQL_PURGE_BATCH = """
DELETE FROM dialogues WHERE id IN (
    SELECT id FROM dialogues WHERE expires_at IS NOT NULL AND expires_at <= $1 AND NOT pinned
    ORDER BY expires_at LIMIT $2
)
"""


def _indexed(record: asyncpg.Record, text_form: int | None = None) -> IndexTexts:
    """The row's indexed texts in ``text_form`` (default: the form it is stored in)."""
    form = record["text_form"] if text_form is None else text_form
    return index_texts(record["content"], record["sender_name"], form, context_of(record))


class PgUpkeepStore(PgStore):
    """Backfills, re-embedding, re-indexing, the purge and the metadata."""

    async def pending_embeddings(self, limit: int) -> list[tuple[int, str]]:
        """Rows stored without an embedding: (id, text embedded in the row's own form)."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_PENDING_EMBEDDINGS, limit, timeout=BULK_TIMEOUT)
        return [(r["id"], _indexed(r).vector) for r in records]

    async def set_embeddings(self, ids: Sequence[int], vectors: np.ndarray, model: str) -> None:
        await self._write_embeddings(SQL_SET_EMBEDDING, ids, vectors, model)

    async def rows_needing_reembed(
        self, model: str, text_form: int, after_id: int, limit: int
    ) -> list[tuple[int, IndexTexts]]:
        """Rows after ``after_id`` not embedded by ``model`` or not in ``text_form``:
        (id, indexed texts in ``text_form``)."""
        async with self._connection() as conn:
            records = await conn.fetch(
                SQL_NEEDING_REEMBED, model, text_form, after_id, limit, timeout=BULK_TIMEOUT
            )
        return [(r["id"], _indexed(r, text_form)) for r in records]

    async def count_needing_reembed(self, model: str, text_form: int) -> int:
        async with self._connection() as conn:
            return int(
                await conn.fetchval(
                    SQL_COUNT_NEEDING_REEMBED, model, text_form, timeout=BULK_TIMEOUT
                )
            )

    async def rows_in_other_form(
        self, text_form: int, after_id: int, limit: int
    ) -> list[tuple[int, IndexTexts]]:
        """Rows after ``after_id`` indexed in another form: (id, indexed texts in
        ``text_form``)."""
        async with self._connection() as conn:
            records = await conn.fetch(
                SQL_OTHER_TEXT_FORM, text_form, after_id, limit, timeout=BULK_TIMEOUT
            )
        return [(r["id"], _indexed(r, text_form)) for r in records]

    async def count_in_other_form(self, text_form: int) -> int:
        async with self._connection() as conn:
            return int(
                await conn.fetchval(SQL_COUNT_OTHER_TEXT_FORM, text_form, timeout=BULK_TIMEOUT)
            )

    async def set_indexed(
        self,
        rows: Sequence[tuple[int, Sequence[str]]],
        vectors: np.ndarray,
        model: str,
        text_form: int,
    ) -> None:
        """Store each row's new embedding and keywords (``(id, terms)``), made in
        ``text_form``."""
        async with self._transaction() as conn:
            await conn.executemany(
                SQL_SET_INDEXED,
                [
                    (row_id, vectors[i], model, list(terms), text_form)
                    for i, (row_id, terms) in enumerate(rows)
                ],
                timeout=BULK_TIMEOUT,
            )

    async def pending_keywords(self, limit: int) -> list[tuple[int, str]]:
        """Rows whose keywords are still to be made, oldest first: (id, text cut into keyword
        terms in the row's own form)."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_PENDING_KEYWORDS, limit, timeout=BULK_TIMEOUT)
        return [(r["id"], _indexed(r).keywords) for r in records]

    async def set_keywords(self, rows: Sequence[tuple[int, Sequence[str]]]) -> None:
        async with self._transaction() as conn:
            await conn.executemany(
                SQL_SET_KEYWORDS, [(i, list(t)) for i, t in rows], timeout=BULK_TIMEOUT
            )

    async def reset_keywords(self) -> int:
        """Mark every row's keywords as stale (the analyser changed); the backfill redoes them."""
        async with self._connection() as conn:
            status = await conn.execute(SQL_RESET_KEYWORDS, timeout=INDEX_BUILD_TIMEOUT)
        return rows_affected(status)

    async def rows_without_time_reference(
        self, after_id: int, limit: int
    ) -> list[tuple[int, str, datetime]]:
        """Rows after ``after_id`` with no time reference: (id, content, created_at)."""
        async with self._connection() as conn:
            records = await conn.fetch(
                SQL_WITHOUT_TIME_REFERENCE, after_id, limit, timeout=BULK_TIMEOUT
            )
        return [(r["id"], r["content"], r["created_at"]) for r in records]

    async def count_without_time_reference(self, after_id: int) -> int:
        async with self._connection() as conn:
            return int(
                await conn.fetchval(
                    SQL_COUNT_WITHOUT_TIME_REFERENCE, after_id, timeout=BULK_TIMEOUT
                )
            )

    async def set_time_references(self, rows: Sequence[tuple[int, datetime, datetime]]) -> None:
        """Store each ``(id, refers_start, refers_end)``."""
        if rows:
            async with self._transaction() as conn:
                await conn.executemany(SQL_SET_TIME_REFERENCE, list(rows), timeout=BULK_TIMEOUT)

    async def purge_expired(self, now: datetime, limit: int) -> int:
        """Delete up to ``limit`` turns expired by ``now`` (never pinned ones) in one short
        statement; how many."""
        async with self._connection() as conn:
            return rows_affected(
                await conn.execute(SQL_PURGE_BATCH, now, limit, timeout=BULK_TIMEOUT)
            )

    async def any_embedded(self) -> bool:
        async with self._connection() as conn:
            return bool(await conn.fetchval(SQL_ANY_EMBEDDED))

    async def read_meta(self) -> dict[str, str]:
        async with self._connection() as conn:
            return {r["key"]: r["value"] for r in await conn.fetch(SQL_META_GET)}

    async def write_meta(self, values: dict[str, str]) -> None:
        async with self._transaction() as conn:
            await conn.executemany(SQL_META_SET, list(values.items()))

    async def claim_first_account(self, self_id: int) -> tuple[int, bool]:
        """The first account, ``self_id`` when none was recorded yet (then True)."""
        async with self._connection() as conn:
            claimed = await conn.fetchval(SQL_CLAIM_FIRST_ACCOUNT, str(self_id))
            value = claimed if claimed is not None else await conn.fetchval(SQL_FIRST_ACCOUNT)
        return int(value), claimed is not None
