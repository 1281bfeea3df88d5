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
    """A pool, and the one place where database failures become core errors."""

    def __init__(self, *, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[PoolConnectionProxy[asyncpg.Record]]:
        try:
            async with self._pool.acquire() as conn:
                yield conn
        except CONNECTION_ERRORS as exc:
            raise DatabaseUnavailableError(f"database unreachable: {exc}") from exc
        except asyncpg.PostgresError as exc:
            raise StorageError(f"database error: {exc}") from exc
