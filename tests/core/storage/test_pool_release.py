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


async def test_a_vector_index_build_leaves_its_memory_setting_on_no_pooled_connection(
    memory_factory, monkeypatch
):
    from memory_core.dialogue import index_store
    from memory_core.recall.options import RecallOptions
    from tests.core.storage.test_vector_index import LIMIT, NOW, turns

    # Above PostgreSQL's default (64MB), so that a setting left behind would show.
    monkeypatch.setattr(index_store, "INDEX_BUILD_MEMORY_MIN_MB", 96)
    memory = await memory_factory(memory_exact_search_max_rows=LIMIT)
    await memory.parts.writer.add_dialogues(turns(1, 40))
    async with memory.parts.database.pool.acquire() as conn:
        default = await conn.fetchval("SHOW maintenance_work_mem")
    await memory.parts.retriever.recall(
        1, "火锅", 700, RecallOptions(now=NOW)
    )  # a large session: builds its index
    await memory.parts.vector_index.wait_built()
    assert memory.parts.vector_index.serves("700:1", 40)
    size = memory.parts.database.pool.get_size()
    connections = [
        await memory.parts.database.pool.acquire() for _ in range(size)
    ]  # every one of them
    try:
        settings = {await conn.fetchval("SHOW maintenance_work_mem") for conn in connections}
    finally:
        for conn in connections:
            await memory.parts.database.pool.release(conn)
    assert default != "96MB" and settings == {default}
