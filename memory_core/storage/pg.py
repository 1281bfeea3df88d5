"""The base of every store: a pool, and the one place where database failures become core
errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from ..errors import DatabaseUnavailableError, StorageError
from .database import CONNECTION_ERRORS


def rows_affected(status: str) -> int:
    """The row count of a command tag such as ``DELETE 3``."""
    return int(status.split()[-1])


class PgStore:
    """A pool, and the one place where database failures become core errors.

    ``connection``: run every statement on that connection (inside a transaction its owner
    holds) instead of taking one from the pool for each.
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
        try:
            if self._bound is not None:
                yield self._bound
                return
            async with self._pool.acquire() as conn:
                yield conn
        except CONNECTION_ERRORS as exc:
            raise DatabaseUnavailableError(f"database unreachable: {exc}") from exc
        except asyncpg.PostgresError as exc:
            raise StorageError(f"database error: {exc}") from exc
