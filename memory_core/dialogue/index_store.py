"""The per-session HNSW indexes of the dialogue table (``vector_index`` decides which exist)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from ..errors import StorageError
from ..storage.database import BULK_TIMEOUT
from ..storage.pg import PgStore
from .columns import COPY_TIMEOUT, INDEX_BUILD_TIMEOUT, SQL_SESSION_SIZE

# The HNSW indexes on the dialogues and whether each is usable (an interrupted CREATE INDEX
# CONCURRENTLY leaves an invalid one). Matches this version's per-session indexes and the
# table-wide index of earlier versions (dialogues_embedding_hnsw_<dim>), which is dropped.
# Indexes another connection is building right now (invalid until done) are left out.
SQL_VECTOR_INDEXES = """
SELECT c.relname AS name, i.indisvalid AS valid
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = 'dialogues'::regclass AND c.relname ~ '^dialogues_(embedding_)?hnsw_'
  AND NOT EXISTS (SELECT 1 FROM pg_stat_progress_create_index p
                  WHERE p.index_relid = i.indexrelid)
"""

SQL_INDEX_BUILD_RUNNING = """
SELECT EXISTS (SELECT 1 FROM pg_stat_progress_create_index WHERE relid = 'dialogues'::regclass)
"""

SQL_INDEX_VALID = """
SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = $1
"""

# One partial HNSW index per large session: only that session's inserts pay for the graph,
# and a search in it needs no filtering. The session key is checked (digits and a colon)
# before it is written into the statement. ef_construction 32 (default 64) builds twice as
# fast and inserts ~1.5x faster; searches use a generous ef_search.
SQL_CREATE_SESSION_VECTOR_INDEX = """
CREATE INDEX {concurrently} IF NOT EXISTS {name} ON dialogues
USING hnsw ((embedding::halfvec({dim})) halfvec_cosine_ops) WITH (m = 16, ef_construction = 32)
WHERE session_key = '{session_key}'
"""

SQL_LARGE_SESSIONS = """
SELECT session_key, count(*) AS n FROM dialogues GROUP BY session_key HAVING count(*) > $1
"""

INDEX_BUILD_MEMORY_MIN_MB = 64

INDEX_BUILD_MEMORY_MAX_MB = 4096

INDEX_BYTES_PER_ROW_OVERHEAD = 200  # HNSW neighbour lists and tuple headers, roughly

# A key of the first account's namespace, or of another QQ account's ("B/...",
# memory_core.accounts): that account is "_a{B}" in the index name.
_SESSION_KEY = re.compile(r"^(?:(\d+)/)?(\d+)(?::(\d+))?$")

_SESSION_INDEX_NAME = re.compile(r"^dialogues_hnsw_(\d+)(?:_a(\d+))?_s(\d+)(?:_(\d+))?$")


def session_index_name(dim: int, session_key: str) -> str | None:
    """The name of the session's HNSW index, or ``None`` for a key that cannot have one."""
    match = _SESSION_KEY.match(session_key)
    if match is None:
        return None
    account, *parts = match.groups()
    prefix = f"dialogues_hnsw_{int(dim)}" + (f"_a{account}" if account is not None else "")
    return f"{prefix}_s" + "_".join(g for g in parts if g is not None)


def parse_session_index_name(name: str) -> tuple[int, str] | None:
    """(dimension, session key) of a per-session index name; ``None`` for any other index."""
    match = _SESSION_INDEX_NAME.match(name)
    if match is None:
        return None
    dim, account, first, second = match.groups()
    key = first if second is None else f"{first}:{second}"
    return int(dim), key if account is None else f"{account}/{key}"


async def _vector_indexes(conn: PoolConnectionProxy[asyncpg.Record]) -> dict[str, bool]:
    return {r["name"]: r["valid"] for r in await conn.fetch(SQL_VECTOR_INDEXES)}


class PgVectorIndexStore(PgStore):
    """Listing, building and dropping the sessions' vector indexes."""

    async def vector_indexes(self) -> dict[str, bool]:
        """The HNSW indexes of the dialogue table, by name: valid (usable) or not."""
        async with self._connection() as conn:
            return await _vector_indexes(conn)

    async def index_build_running(self) -> bool:
        """Whether some connection is building an index on the dialogue table right now."""
        async with self._connection() as conn:
            return bool(await conn.fetchval(SQL_INDEX_BUILD_RUNNING))

    async def large_sessions(self, more_than: int) -> dict[str, int]:
        """Sessions holding more than ``more_than`` rows, with their sizes (a full scan)."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_LARGE_SESSIONS, more_than, timeout=COPY_TIMEOUT)
        return {r["session_key"]: r["n"] for r in records}

    async def create_session_vector_index(
        self, dim: int, session_key: str, *, concurrently: bool = False
    ) -> None:
        """Build the HNSW index of one session (replacing a broken one of the same name).

        ``concurrently`` builds without blocking writes (slower; for a running bot).
        """
        name = session_index_name(dim, session_key)
        if name is None:
            raise StorageError(f"no vector index for the session key {session_key!r}")
        async with self._connection() as conn:
            if (await _vector_indexes(conn)).get(name) is False:
                await conn.execute(f'DROP INDEX IF EXISTS "{name}"', timeout=BULK_TIMEOUT)
            # An HNSW build is fast only while its graph fits in maintenance_work_mem; beyond
            # that it crawls (measured: 1M rows at 384-d). Size it to the session, within bounds.
            rows = int(await conn.fetchval(SQL_SESSION_SIZE, session_key, timeout=BULK_TIMEOUT))
            megabytes = int(rows * (2 * dim + INDEX_BYTES_PER_ROW_OVERHEAD) * 1.3 / 2**20)
            megabytes = min(INDEX_BUILD_MEMORY_MAX_MB, max(INDEX_BUILD_MEMORY_MIN_MB, megabytes))
            # A session setting (CONCURRENTLY cannot run in a transaction, so no SET LOCAL):
            # undone here, also when the build fails, as the pool's release resets nothing.
            await conn.execute(f"SET maintenance_work_mem = '{megabytes}MB'")
            try:
                await conn.execute(
                    SQL_CREATE_SESSION_VECTOR_INDEX.format(
                        name=name,
                        dim=int(dim),
                        session_key=session_key,  # checked by session_index_name
                        concurrently="CONCURRENTLY" if concurrently else "",
                    ),
                    timeout=INDEX_BUILD_TIMEOUT,
                )
            finally:
                await conn.execute("RESET maintenance_work_mem")
            # IF NOT EXISTS also returns at once while another connection is building it.
            if not await conn.fetchval(SQL_INDEX_VALID, name):
                raise StorageError(f"the vector index {name} is being built elsewhere")

    async def drop_vector_indexes(self, names: Sequence[str] | None = None) -> None:
        """Drop these HNSW indexes (default: all of them)."""
        async with self._connection() as conn:
            if names is None:
                names = list(await _vector_indexes(conn))
            for name in names:
                await conn.execute(f'DROP INDEX IF EXISTS "{name}"')
