"""The base of every store: a pool, and the one place where database failures become core
errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime

import asyncpg
import numpy as np
from asyncpg.pool import PoolConnectionProxy

from ..errors import DatabaseUnavailableError, StorageError
from .database import BULK_TIMEOUT, CONNECTION_ERRORS


def rows_affected(status: str) -> int:
    """The row count of a command tag such as ``DELETE 3``."""
    return int(status.split()[-1])


@contextmanager
def database_errors() -> Iterator[None]:
    """Turn what the driver raises into the core's errors: unreachable, or refused."""
    try:
        yield
    except CONNECTION_ERRORS as exc:
        raise DatabaseUnavailableError(f"database unreachable: {exc}") from exc
    except asyncpg.PostgresError as exc:
        raise StorageError(f"database error: {exc}") from exc


@asynccontextmanager
async def pooled(pool: asyncpg.Pool) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
    """A connection of ``pool``, dropped at once when a statement on it goes unanswered
    (its timeout) or its caller gives up (cancelled).

    asyncpg's own way out of such a statement is a cancel request over a new connection to
    the same server, and the pool keeps the caller until that is answered: another command
    timeout when the server accepts connections and never answers (a hung host, a cut
    network), a minute in all before a primary's promoted standby was tried (bench/RESULTS.md,
    2026-12-07, failover). Dropping the connection is the answer that needs nothing from the
    server, which ends the statement (and rolls back its transaction) once it notices. The
    pool's other connections most likely lead to the same server: they are replaced on their
    next use (after a timeout, not after a caller gave up), by a connect that tries each host
    in turn (``HostByHost``).
    """
    async with pool.acquire() as conn:
        try:
            yield conn
        except BaseException as exc:
            if went_unanswered(exc):
                conn.terminate()
                await pool.expire_connections()
            elif isinstance(exc, asyncio.CancelledError):
                conn.terminate()  # says nothing of the server: the other connections stay
            raise


def went_unanswered(exc: BaseException) -> bool:
    """Whether ``exc`` is a statement's timeout, or was raised from one (``database_errors``
    of a store inside a transaction makes it a ``DatabaseUnavailableError`` on its way)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, asyncio.TimeoutError):
            return True
        cause = cause.__cause__
    return False


@asynccontextmanager
async def in_transaction(
    conn: PoolConnectionProxy[asyncpg.Record],
) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
    """``conn.transaction()`` (a savepoint inside another), except after a statement that
    went unanswered or a caller that gave up: no ROLLBACK then, which would wait on the same
    silent server; ``pooled`` drops the connection and the server rolls back."""
    transaction = conn.transaction()
    await transaction.start()
    try:
        yield conn
    except BaseException as exc:
        if not (went_unanswered(exc) or isinstance(exc, asyncio.CancelledError)):
            await transaction.rollback()
        raise
    await transaction.commit()


class PgStore:
    """A pool, and the one place where database failures become core errors.

    ``connection``: run every statement on that connection (inside a transaction its owner
    holds, see ``database_handle.Transaction``) instead of taking one from the pool for each.
    """

    def __init__(
        self,
        *,
        pool: asyncpg.Pool,
        connection: PoolConnectionProxy[asyncpg.Record] | None = None,
    ) -> None:
        self._pool = pool
        self._bound = connection

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
        with database_errors():
            if self._bound is not None:
                yield self._bound
                return
            async with pooled(self._pool) as conn:
                yield conn

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
        """``_connection`` inside a transaction (``in_transaction``)."""
        async with self._connection() as conn, in_transaction(conn):
            yield conn

    async def database_now(self) -> datetime:
        """The database server's clock: the one every bot sharing this database agrees on
        (leases, claims and the daily purge go by it, not by each machine's own clock)."""
        async with self._connection() as conn:
            moment: datetime = await conn.fetchval("SELECT now()")
        return moment

    async def _write_embeddings(
        self, sql: str, ids: Sequence[int], vectors: np.ndarray, model: str
    ) -> None:
        """Run ``sql`` (``$1`` id, ``$2`` vector, ``$3`` model) for each row, all or none."""
        # executemany is atomic by itself (asyncpg >= 0.22): an explicit transaction would
        # only add two round trips (BEGIN, COMMIT) to every batch of embeddings.
        async with self._connection() as conn:
            await conn.executemany(
                sql,
                [(row_id, vectors[i], model) for i, row_id in enumerate(ids)],
                timeout=BULK_TIMEOUT,
            )

    async def _sessions_page(
        self, sql: str, session_keys: Sequence[str] | None, after_id: int, limit: int
    ) -> list[asyncpg.Record]:
        """An export page: ``sql`` (``$1`` session keys or NULL for all, ``$2`` the last id
        read, ``$3`` the page size)."""
        async with self._connection() as conn:
            return list(
                await conn.fetch(
                    sql,
                    None if session_keys is None else list(session_keys),
                    after_id,
                    limit,
                    timeout=BULK_TIMEOUT,
                )
            )
