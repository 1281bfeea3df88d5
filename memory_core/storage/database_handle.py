"""``Database``: the one way to reach the memory database — the current pool, and the stores
of that pool, or of one transaction."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from ..errors import DatabaseUnavailableError
from .pg import PgStore, database_errors, in_transaction, pooled

StoreT = TypeVar("StoreT", bound=PgStore)
Stores = dict[type[PgStore], PgStore]


def _kept(stores: Stores, kind: type[StoreT], build: Callable[[], StoreT]) -> StoreT:
    """The ``kind`` store kept in ``stores``, built on first use (stores hold no state)."""
    store = stores.get(kind)
    if not isinstance(store, kind):
        store = build()
        stores[kind] = store
    return store


class Transaction:
    """One transaction on one connection: the stores handed out here run every statement in
    it, so changes to tables of different owners commit or roll back together."""

    def __init__(self, pool: asyncpg.Pool, connection: PoolConnectionProxy[asyncpg.Record]):
        self._pool = pool
        self._connection = connection
        self._stores: Stores = {}

    def store(self, kind: type[StoreT]) -> StoreT:
        """The ``kind`` store bound to this transaction."""
        return _kept(self._stores, kind, lambda: kind(pool=self._pool, connection=self._connection))


class Database:
    """Holds the pool while the memory is connected and hands out its stores.

    Stores keep nothing but their pool, so each kind is built once per pool; a new pool (after
    a reconnect) gets new ones. Every feature is handed this object rather than a pool or a
    store, so it always reaches the pool of the moment.
    """

    def __init__(self) -> None:
        self._pool: asyncpg.Pool | None = None
        self._stores: Stores = {}

    @property
    def connected(self) -> bool:
        return self._pool is not None

    @property
    def pool(self) -> asyncpg.Pool:
        """The current pool (``DatabaseUnavailableError`` while there is none)."""
        if self._pool is None:
            raise DatabaseUnavailableError("the memory database is not connected")
        return self._pool

    def attach(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._stores = {}

    def detach(self) -> asyncpg.Pool | None:
        """Forget the pool and its stores; return the pool (if any) for its owner to close."""
        pool, self._pool = self._pool, None
        self._stores = {}
        return pool

    def store(self, kind: type[StoreT]) -> StoreT:
        """The ``kind`` store of the current pool (``DatabaseUnavailableError`` while there is
        none)."""
        pool = self.pool
        return _kept(self._stores, kind, lambda: kind(pool=pool))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Transaction]:
        """One transaction for a change that spans the tables of several stores: committed
        when the block ends, rolled back when it raises."""
        pool = self.pool
        with database_errors():
            async with pooled(pool) as conn, in_transaction(conn):
                yield Transaction(pool, conn)
