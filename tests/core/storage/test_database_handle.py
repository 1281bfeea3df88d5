"""``Database``: the stores of the current pool, one of each kind per pool, and a clear error
while there is no pool."""

from __future__ import annotations

import pytest

from memory_core.dialogue.upkeep_store import PgUpkeepStore
from memory_core.distill.store import PgDistilledStore
from memory_core.errors import DatabaseUnavailableError
from memory_core.storage.database import create_pool
from memory_core.storage.database_handle import Database
from memory_core.storage.pg import PgStore


async def test_a_store_is_built_once_per_pool_and_a_new_pool_gets_new_stores(
    memory_factory, fresh_dsn
):
    await memory_factory()  # migrates the fresh database
    first, second = await create_pool(fresh_dsn, 2), await create_pool(fresh_dsn, 2)
    try:
        database = Database()
        database.attach(first)
        dialogues = database.store(PgUpkeepStore)
        assert database.store(PgUpkeepStore) is dialogues
        assert database.store(PgDistilledStore) is not dialogues  # one store per kind
        assert isinstance(database.store(PgDistilledStore), PgDistilledStore)
        assert "embedding_model" in await dialogues.read_meta()  # it reaches the database

        assert database.detach() is first
        database.attach(second)
        again = database.store(PgUpkeepStore)
        assert again is not dialogues
        assert again._pool is second
    finally:
        await first.close()
        await second.close()


async def test_without_a_pool_every_store_and_the_pool_say_the_database_is_not_connected():
    database = Database()
    assert not database.connected
    with pytest.raises(DatabaseUnavailableError, match="the memory database is not connected"):
        database.store(PgUpkeepStore)
    with pytest.raises(DatabaseUnavailableError, match="not connected"):
        _ = database.pool
    assert database.detach() is None


class Sleeper(PgStore):
    """A store whose one statement outlasts its own timeout."""

    async def sleep(self, seconds: float, timeout: float) -> None:
        async with self._connection() as conn:
            await conn.execute(f"SELECT pg_sleep({seconds})", timeout=timeout)

    async def backend(self) -> int:
        async with self._connection() as conn:
            return int(await conn.fetchval("SELECT pg_backend_pid()"))


@pytest.mark.parametrize("in_transaction", [False, True])
async def test_a_connection_whose_statement_timed_out_is_dropped_not_reused(
    fresh_dsn: str, in_transaction: bool
) -> None:
    """Its timeout is all a client knows of a silent server: the connection is closed, not
    kept for a cancel request and a ROLLBACK the same server would have to answer
    (``storage.pg.pooled``), also when the store runs inside ``Database.transaction``."""
    pool = await create_pool(fresh_dsn, 1)  # one connection: a reused one has the same backend
    try:
        database = Database()
        database.attach(pool)
        before = await database.store(Sleeper).backend()
        with pytest.raises(DatabaseUnavailableError):
            if in_transaction:
                async with database.transaction() as tx:
                    await tx.store(Sleeper).sleep(30, timeout=0.2)
            else:
                await database.store(Sleeper).sleep(30, timeout=0.2)
        assert await database.store(Sleeper).backend() != before
    finally:
        pool.terminate()
