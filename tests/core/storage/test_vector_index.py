"""MEMORY_VECTOR_INDEX: large sessions get HNSW indexes of their own; recall is right."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import asyncpg
import numpy as np
from pgvector.asyncpg import register_vector

from memory_core.dialogue.index_store import parse_session_index_name, session_index_name
from memory_core.dialogue.recall_store import SQL_ANCHORS_INDEX
from memory_core.models import TurnInput
from memory_core.recall.options import RecallOptions

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(days=1)
LIMIT = 10  # MEMORY_EXACT_SEARCH_MAX_ROWS in these tests


def turns(user: int, count: int, group: int | None = 700) -> list[TurnInput]:
    topics = ["猫咪", "火锅", "跑步", "电影", "考试", "旅行"]
    return [
        TurnInput(
            user_id=user,
            group_id=group,
            role="user",
            content=f"第{i}条：我们聊了{topics[i % len(topics)]}，编号 {user}-{i}",
            message_id=user * 10_000 + i + (0 if group is None else 5_000),
            created_at=T0 + timedelta(minutes=i),
        )
        for i in range(count)
    ]


async def index_state(dsn: str) -> dict[str, bool]:
    conn = await asyncpg.connect(dsn)
    try:
        records = await conn.fetch(
            "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c "
            "ON c.oid = i.indexrelid WHERE c.relname ~ '^dialogues_(embedding_)?hnsw_'"
        )
    finally:
        await conn.close()
    return {r["relname"]: r["indisvalid"] for r in records}


async def anchor_ids(memory, query: str, user: int = 1, group: int | None = 700) -> list[int]:
    result = await memory.parts.retriever.recall(
        user, query, group, RecallOptions(top_n=3, window_size=0, now=NOW)
    )
    return [w.anchor_id for w in result.windows]


def test_index_names_carry_the_dimension_and_session():
    assert session_index_name(384, "123456:789") == "dialogues_hnsw_384_s123456_789"
    assert session_index_name(1024, "789") == "dialogues_hnsw_1024_s789"
    assert parse_session_index_name("dialogues_hnsw_384_s123456_789") == (384, "123456:789")
    assert parse_session_index_name("dialogues_hnsw_1024_s789") == (1024, "789")
    # Anything else is no session index, and no key but a generated one is written into SQL.
    assert parse_session_index_name("dialogues_embedding_hnsw_384") is None
    assert session_index_name(384, "1'; DROP TABLE dialogues; --") is None


async def test_auto_indexes_a_session_the_first_time_a_recall_meets_it_above_the_limit(
    memory_factory, fresh_dsn
):
    memory = await memory_factory(memory_exact_search_max_rows=LIMIT)
    await memory.parts.writer.add_dialogues(turns(2, 5) + turns(1, 40))
    await memory.parts.retriever.recall(
        2, "火锅", 700, RecallOptions(now=NOW)
    )  # a small session: exact, nothing to build
    assert not memory.parts.vector_index.building and await index_state(fresh_dsn) == {}
    stats = await memory.stats()
    assert "向量索引：暂不需要（不超过 10 条的会话精确检索）" in stats.lines_zh()

    exact = await anchor_ids(memory, "编号 1-31 的那次")
    assert len(exact) == 3
    # That recall searched exactly and asked for the index (a small build may be done already).
    await memory.parts.vector_index.wait_built()
    assert memory.parts.vector_index.serves("700:1", 40)
    assert await index_state(fresh_dsn) == {"dialogues_hnsw_384_s700_1": True}
    assert (
        "向量索引：1 个大会话已建立（不超过 10 条的会话精确检索）"
        in (await memory.stats()).lines_zh()
    )
    through_index = await anchor_ids(memory, "编号 1-31 的那次")
    assert len(through_index) == 3 and through_index[0] == exact[0]
    # Writes go on with the index in place, and the new row is found through it.
    await memory.parts.writer.add_turn(
        TurnInput(
            user_id=1,
            group_id=700,
            role="user",
            content="我最爱的火锅是毛肚火锅",
            message_id=99,
            created_at=T0 + timedelta(hours=5),
        )
    )
    result = await memory.parts.retriever.recall(
        1, "毛肚火锅", 700, RecallOptions(top_n=1, window_size=0, now=NOW)
    )
    assert [t.content for t in result.turns] == ["我最爱的火锅是毛肚火锅"]


async def test_the_planner_searches_a_large_session_through_its_own_index(
    memory_factory, fresh_dsn
):
    memory = await memory_factory(memory_exact_search_max_rows=LIMIT)
    async with memory.parts.upkeep.vector_index_deferred():
        await memory.parts.writer.add_dialogues(
            turns(1, 200) + turns(2, 200) + turns(1, 8, group=None)
        )
    assert memory.parts.vector_index.indexed == {"700:1", "700:2"}  # not the 8-turn private chat
    conn = await asyncpg.connect(fresh_dsn)
    try:
        await register_vector(conn)
        vector = (
            np.ones(memory.parts.embedder.dim, dtype=np.float32) / memory.parts.embedder.dim**0.5
        )
        async with conn.transaction():
            # The settings of PgRecallStore.anchor_candidates' index path.
            await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
            await conn.execute("SET LOCAL enable_sort = off")
            statement = await conn.prepare(
                "EXPLAIN " + SQL_ANCHORS_INDEX.format(dim=memory.parts.embedder.dim)
            )
            for _ in range(7):  # past the five custom plans a cached statement starts with
                plan = "\n".join(
                    r[0]
                    for r in await statement.fetch(
                        "700:2",
                        memory.parts.embedder.model,
                        NOW,
                        vector,
                        12,
                        None,
                        [],
                        None,
                        None,
                        None,
                    )
                )
    finally:
        await conn.close()
    assert "Index Scan using dialogues_hnsw_384_s700_2" in plan


async def test_opening_keeps_valid_indexes_and_drops_broken_and_old_ones(memory_factory, fresh_dsn):
    first = await memory_factory(memory_exact_search_max_rows=LIMIT)
    async with first.parts.upkeep.vector_index_deferred():
        await first.parts.writer.add_dialogues(turns(1, 20) + turns(2, 20))
    await first.aclose()
    conn = await asyncpg.connect(fresh_dsn)
    # An interrupted CREATE INDEX CONCURRENTLY leaves an invalid index: it is not trusted.
    await conn.execute(
        "UPDATE pg_index SET indisvalid = false "
        "WHERE indexrelid = 'dialogues_hnsw_384_s700_2'::regclass"
    )
    # The table-wide index of earlier versions is replaced by per-session ones.
    await conn.execute(
        "CREATE INDEX dialogues_embedding_hnsw_384 ON dialogues "
        "USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)"
    )
    await conn.close()
    again = await memory_factory(memory_exact_search_max_rows=LIMIT)
    assert again.parts.vector_index.indexed == {"700:1"}
    assert await index_state(fresh_dsn) == {"dialogues_hnsw_384_s700_1": True}
    assert len(await anchor_ids(again, "火锅", user=2)) == 3  # exact meanwhile
    await again.parts.vector_index.wait_built()
    assert again.parts.vector_index.indexed == {"700:1", "700:2"}
    assert set((await index_state(fresh_dsn)).values()) == {True}


async def test_never_drops_the_indexes_and_searches_large_sessions_exactly(
    memory_factory, fresh_dsn
):
    first = await memory_factory(memory_exact_search_max_rows=LIMIT)
    async with first.parts.upkeep.vector_index_deferred():
        await first.parts.writer.add_dialogues(turns(1, 30))
    expected = await anchor_ids(first, "编号 1-20 的那次")
    await first.aclose()
    memory = await memory_factory(memory_exact_search_max_rows=LIMIT, memory_vector_index="never")
    assert await index_state(fresh_dsn) == {}
    found = await anchor_ids(memory, "编号 1-20 的那次")
    assert len(found) == 3 and found[0] == expected[0]
    assert not memory.parts.vector_index.building and not memory.parts.vector_index.indexed
    assert "向量索引：已关闭，全部精确检索" in (await memory.stats()).lines_zh()


async def test_bulk_import_indexes_only_the_sessions_above_the_limit(memory_factory, fresh_dsn):
    memory = await memory_factory(memory_exact_search_max_rows=LIMIT)
    async with memory.parts.upkeep.vector_index_deferred():
        await memory.parts.writer.add_dialogues(turns(1, 8) + turns(2, 8, group=None))
    assert await index_state(fresh_dsn) == {} and not memory.parts.vector_index.indexed
    async with memory.parts.upkeep.vector_index_deferred():
        await memory.parts.writer.add_dialogues(turns(3, 12) + turns(4, 12, group=None))
    assert await index_state(fresh_dsn) == {
        "dialogues_hnsw_384_s700_3": True,
        "dialogues_hnsw_384_s4": True,
    }


async def test_an_index_another_connection_is_building_is_neither_dropped_nor_used(
    memory_factory, fresh_dsn
):
    memory = await memory_factory(memory_exact_search_max_rows=LIMIT)
    await memory.parts.writer.add_dialogues(turns(1, 20))
    writer = await asyncpg.connect(fresh_dsn)
    watcher = await asyncpg.connect(fresh_dsn)
    try:
        # An open writing transaction holds a concurrent build in its waiting phase, while
        # the index already exists in the catalogue, invalid.
        transaction = writer.transaction()
        await transaction.start()
        await writer.execute("LOCK TABLE dialogues IN ROW EXCLUSIVE MODE")
        await anchor_ids(memory, "火锅")  # starts the background build
        for _ in range(600):  # bounded wait for the build to register, not a timing assertion
            if await watcher.fetchval("SELECT count(*) FROM pg_stat_progress_create_index"):
                break
            await asyncio.sleep(0.05)
        assert list(await index_state(fresh_dsn)) == ["dialogues_hnsw_384_s700_1"]

        # Another process opening the same memory neither drops nor trusts it ...
        other = await memory_factory(memory_exact_search_max_rows=LIMIT)
        assert other.parts.vector_index.indexed == set()
        assert len(await anchor_ids(other, "火锅")) == 3  # ... searches exactly, and does
        await (
            other.parts.vector_index.wait_built()
        )  # not start a second build (they would deadlock)
        assert other.parts.vector_index.indexed == set()

        await transaction.commit()
        await memory.parts.vector_index.wait_built()
    finally:
        await writer.close()
        await watcher.close()
    assert memory.parts.vector_index.indexed == {"700:1"}
    assert await index_state(fresh_dsn) == {"dialogues_hnsw_384_s700_1": True}
    await other.parts.upkeep.index_large_sessions()  # what its retry a minute later comes to
    assert other.parts.vector_index.indexed == {"700:1"}


async def test_two_large_sessions_met_at_once_are_both_indexed(memory_factory, fresh_dsn):
    memory = await memory_factory(memory_exact_search_max_rows=LIMIT)
    await memory.parts.writer.add_dialogues(turns(1, 20) + turns(2, 20))
    found = await asyncio.gather(
        anchor_ids(memory, "火锅", user=1), anchor_ids(memory, "火锅", user=2)
    )
    assert [len(ids) for ids in found] == [3, 3]
    await (
        memory.parts.vector_index.wait_built()
    )  # one build after the other: together they deadlock
    assert memory.parts.vector_index.indexed == {"700:1", "700:2"}
    assert set((await index_state(fresh_dsn)).values()) == {True}
