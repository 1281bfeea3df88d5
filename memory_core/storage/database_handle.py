"""``Database``: the one way to reach the memory database — the current pool, and the stores
of that pool."""

from __future__ import annotations

from typing import TypeVar

import asyncpg

from ..errors import DatabaseUnavailableError
from .pg import PgStore

StoreT = TypeVar("StoreT", bound=PgStore)


class Database:
    """Holds the pool while the memory is connected and hands out its stores.

    Stores keep nothing but their pool, so each kind is built once per pool; a new pool (after
    a reconnect) gets new ones. Every feature is handed this object rather than a pool or a
    store, so it always reaches the pool of the moment.
    """

    def __init__(self) -> None:
        self._pool: asyncpg.Pool | None = None
        self._stores: dict[type[PgStore], PgStore] = {}

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
        store = self._stores.get(kind)
        if not isinstance(store, kind):
            store = kind(pool=pool)
            self._stores[kind] = store
        return store
