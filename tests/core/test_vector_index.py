"""MEMORY_VECTOR_INDEX: when the HNSW index exists, and that recall is right either way."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import asyncpg

from memory_core.models import TurnInput

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
            message_id=user * 10_000 + i,
            created_at=T0 + timedelta(minutes=i),
        )
        for i in range(count)
    ]


async def index_state(dsn: str) -> dict[str, bool]:
    conn = await asyncpg.connect(dsn)
    try:
        records = await conn.fetch(
            "SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c "
            "ON c.oid = i.indexrelid WHERE c.relname LIKE 'dialogues_embedding_hnsw_%'"
        )
    finally:
        await conn.close()
    return {r["relname"]: r["indisvalid"] for r in records}


async def anchor_ids(memory, query: str) -> list[int]:
    result = await memory.recall(1, query, 700, top_n=3, window_size=0, now=NOW)
    return [w.anchor_id for w in result.windows]


async def test_auto_builds_the_index_when_a_recall_meets_a_large_session(memory_factory, fresh_dsn):
    memory = await memory_factory(memory_exact_search_max_rows=LIMIT)
    assert await index_state(fresh_dsn) == {}  # nothing needs it yet
    await memory.add_dialogues(turns(2, 5))  # a small session: exact, no build
    await memory.recall(2, "火锅", 700, now=NOW)
    assert not memory.vector_index.building and await index_state(fresh_dsn) == {}
    stats = await memory.stats()
    assert stats.vector_index == "none"
    assert "向量索引：未建立，暂不需要（会话不超过 10 条时精确检索）" in stats.lines_zh()

    await memory.add_dialogues(turns(1, 40))
    exact = await anchor_ids(memory, "编号 1-31 的那次")
    assert len(exact) == 3
    # That recall searched exactly and asked for the index (a small build may be done already).
    assert memory.vector_index.building or memory.vector_index.ready
    await memory.vector_index.wait_built()
    assert memory.vector_index.ready and memory.vector_index.serves(40)
    assert list((await index_state(fresh_dsn)).values()) == [True]
    assert (await memory.stats()).vector_index == "ready"
    # Through the index: three anchors again, the best one the same as the exact search's.
    through_index = await anchor_ids(memory, "编号 1-31 的那次")
    assert len(through_index) == 3 and through_index[0] == exact[0]
    # Writes go on with the index in place, and the new row is found.
    await memory.add_turn(
        TurnInput(
            user_id=1,
            group_id=700,
            role="user",
            content="我最爱的火锅是毛肚火锅",
            message_id=99,
            created_at=T0 + timedelta(hours=5),
        )
    )
    result = await memory.recall(1, "毛肚火锅", 700, top_n=1, window_size=0, now=NOW)
    assert [t.content for t in result.turns] == ["我最爱的火锅是毛肚火锅"]


async def test_auto_keeps_an_existing_index_and_drops_a_broken_one(memory_factory, fresh_dsn):
    first = await memory_factory(memory_exact_search_max_rows=LIMIT, memory_vector_index="always")
    await first.add_dialogues(turns(1, 20))
    await first.aclose()
    again = await memory_factory(memory_exact_search_max_rows=LIMIT)
    assert again.vector_index.ready
    assert list((await index_state(fresh_dsn)).values()) == [True]
    await again.aclose()

    # An interrupted CREATE INDEX CONCURRENTLY leaves an invalid index: it is not trusted.
    conn = await asyncpg.connect(fresh_dsn)
    await conn.execute(
        "UPDATE pg_index SET indisvalid = false WHERE indexrelid = "
        "(SELECT oid FROM pg_class WHERE relname LIKE 'dialogues_embedding_hnsw_%')"
    )
    await conn.close()
    third = await memory_factory(memory_exact_search_max_rows=LIMIT)
    assert not third.vector_index.ready
    assert await index_state(fresh_dsn) == {}
    assert len(await anchor_ids(third, "火锅")) == 3  # exact meanwhile
    await third.vector_index.wait_built()
    assert third.vector_index.ready
    assert list((await index_state(fresh_dsn)).values()) == [True]


async def test_never_drops_the_index_and_searches_large_sessions_exactly(memory_factory, fresh_dsn):
    first = await memory_factory(memory_exact_search_max_rows=LIMIT, memory_vector_index="always")
    await first.add_dialogues(turns(1, 30))
    expected = await anchor_ids(first, "编号 1-20 的那次")
    await first.aclose()
    memory = await memory_factory(memory_exact_search_max_rows=LIMIT, memory_vector_index="never")
    assert await index_state(fresh_dsn) == {}
    found = await anchor_ids(memory, "编号 1-20 的那次")
    assert len(found) == 3 and found[0] == expected[0]
    assert not memory.vector_index.building and not memory.vector_index.ready
    assert (await memory.stats()).vector_index == "off"


async def test_bulk_import_builds_the_index_only_when_a_session_needs_it(memory_factory, fresh_dsn):
    memory = await memory_factory(memory_exact_search_max_rows=LIMIT)
    async with memory.vector_index_deferred():
        await memory.add_dialogues(turns(1, 8) + turns(2, 8, group=None))
    assert await index_state(fresh_dsn) == {} and not memory.vector_index.ready
    async with memory.vector_index_deferred():
        await memory.add_dialogues(turns(3, 12))
    assert list((await index_state(fresh_dsn)).values()) == [True]
    assert memory.vector_index.ready


async def test_always_builds_the_index_on_opening_an_empty_memory(memory_factory, fresh_dsn):
    memory = await memory_factory(memory_vector_index="always")
    assert memory.vector_index.ready
    assert list(await index_state(fresh_dsn)) == [
        f"dialogues_embedding_hnsw_{memory.embedding_dim}"
    ]
