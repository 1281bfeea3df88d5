"""Releasing a pooled connection (``storage.database.create_pool``) on the embedded PostgreSQL:
no reset round trip, but an open transaction never survives into the next use."""

from __future__ import annotations

from memory_core.storage.database import create_pool


async def test_release_sends_no_reset_query_so_session_settings_are_the_codes_to_undo(
    memory_factory, fresh_dsn
):
    await memory_factory()  # migrated: the pool's connections register the vector types
    pool = await create_pool(fresh_dsn, 1)  # one connection: the next acquire gets it back
    try:
        async with pool.acquire() as conn:
            await conn.execute("SET application_name = 'left-by-the-last-user'")
        async with pool.acquire() as conn:
            # asyncpg's default reset (RESET ALL …) would have cleared it: one round trip saved.
            assert await conn.fetchval("SHOW application_name") == "left-by-the-last-user"
    finally:
        await pool.close()


async def test_release_still_rolls_back_a_transaction_left_open(memory_factory, fresh_dsn):
    await memory_factory()
    pool = await create_pool(fresh_dsn, 1)
    try:
        async with pool.acquire() as conn:
            await conn.execute("CREATE TABLE pool_probe (n integer)")
            left_open = conn.transaction()
            await left_open.start()
            await conn.execute("INSERT INTO pool_probe VALUES (1)")
        async with pool.acquire() as conn:
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SELECT count(*) FROM pool_probe") == 0
    finally:
        await pool.close()
