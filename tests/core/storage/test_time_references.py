"""Rows stored before migration 008 get the time they talk about in the background, in
bounded rounds that a restart resumes."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta, timezone

from memory_core.dialogue.time_references import DONE, PROGRESS_META
from memory_core.dialogue.upkeep_store import PgUpkeepStore
from memory_core.models import TurnInput
from memory_core.recall.options import RecallOptions

SH = timezone(timedelta(hours=8))
TUESDAY = datetime(2024, 1, 16, 8, 0, tzinfo=SH)  # 08:00 in Shanghai
MONDAY_EVENING = datetime(2024, 1, 15, 20, 0, tzinfo=SH)
SAID = [
    "今天加班到好晚，累死了",
    "我明天上午十点要去体检",
    "晚饭吃的饺子",
    "下周三要交季度报告",
    "周末去爬山了",
]


def turns() -> list[TurnInput]:
    return [
        TurnInput(
            user_id=1,
            role="user",
            content=text,
            created_at=MONDAY_EVENING + timedelta(minutes=i),
        )
        for i, text in enumerate(SAID)
    ]


async def stored_before_migration_008(memory_factory):
    """A database whose rows have no time reference and whose walk has never run."""
    old = await memory_factory()
    await old.parts.writer.add_dialogues(turns())
    async with old.parts.database.pool.acquire() as conn:
        await conn.execute("UPDATE dialogues SET refers_start = NULL, refers_end = NULL")
        await conn.execute("DELETE FROM memory_meta WHERE key = $1", PROGRESS_META)
    await old.aclose()


async def references(memory) -> dict[str, tuple[datetime | None, datetime | None]]:
    async with memory.parts.database.pool.acquire() as conn:
        rows = await conn.fetch("SELECT content, refers_start, refers_end FROM dialogues")
    return {r["content"]: (r["refers_start"], r["refers_end"]) for r in rows}


async def progress(memory) -> str | None:
    async with memory.parts.database.pool.acquire() as conn:
        return await conn.fetchval("SELECT value FROM memory_meta WHERE key = $1", PROGRESS_META)


async def test_old_rows_get_their_time_reference_in_bounded_rounds_that_a_restart_resumes(
    memory_factory, caplog
):
    await stored_before_migration_008(memory_factory)
    memory = await memory_factory()
    assert memory.parts.upkeep.time_references.due
    assert all(r == (None, None) for r in (await references(memory)).values())
    memory.parts.upkeep.time_references.batch_size = 2

    caplog.set_level(logging.INFO, logger="memory_core.dialogue.time_references")
    # No time to spare: one batch a round, and the metadata says how far the walk got.
    assert not await memory.parts.upkeep.time_references.run(
        memory.parts.database.store(PgUpkeepStore), max_seconds=0
    )
    first_two = await references(memory)
    assert first_two["我明天上午十点要去体检"][0] is not None
    assert first_two["下周三要交季度报告"] == (None, None)
    assert "reading the times 5 stored turn(s)" in caplog.text
    assert "2 turn(s) read this round (2 talk about a time), 3 left" in caplog.text
    walked = await progress(memory)
    assert walked is not None and int(walked) > 0
    await memory.aclose()

    # A restart goes on from there and finishes.
    resumed = await memory_factory()
    assert resumed.parts.upkeep.time_references.after == int(walked)
    assert await resumed.parts.upkeep.time_references.run(
        resumed.parts.database.store(PgUpkeepStore)
    )
    assert "time references done" in caplog.text
    found = await references(resumed)
    tuesday_morning = found["我明天上午十点要去体检"]
    assert tuesday_morning[0] is not None and tuesday_morning[1] is not None
    assert tuesday_morning[0] <= datetime(2024, 1, 16, 10, 0, tzinfo=SH) < tuesday_morning[1]
    assert found["下周三要交季度报告"][0] == datetime(2024, 1, 24, tzinfo=SH)
    assert found["晚饭吃的饺子"] == (None, None)
    assert await progress(resumed) == DONE
    # The plan said the evening before is what a question about this morning finds.
    result = await resumed.parts.retriever.recall(
        1, "我今天上午要干嘛", options=RecallOptions(top_n=1, window_size=0, now=TUESDAY)
    )
    assert [t.content for t in result.turns] == ["我明天上午十点要去体检"]
    await resumed.aclose()

    # Once done, later starts have no walk to do.
    assert not (await memory_factory()).parts.upkeep.time_references.due


async def test_the_maintenance_loop_fills_old_time_references_by_itself(memory_factory):
    await stored_before_migration_008(memory_factory)
    memory = await memory_factory()
    memory.parts.upkeep.time_references.batch_size = 2
    memory.start_maintenance(interval=0.05)
    for _ in range(1200):  # polling (60 s at most) for the background walk, not timing it
        if await progress(memory) == DONE:
            break
        await asyncio.sleep(0.05)
    assert await progress(memory) == DONE
    assert not memory.parts.upkeep.time_references.due
    assert (await references(memory))["我明天上午十点要去体检"][0] is not None


async def test_a_new_database_walks_once_and_rows_stored_after_it_are_filled_when_stored(
    memory_factory,
):
    memory = await memory_factory()
    assert await memory.parts.upkeep.time_references.run(memory.parts.database.store(PgUpkeepStore))
    await memory.parts.writer.add_dialogues(turns())
    assert (await references(memory))["我明天上午十点要去体检"][0] is not None
    await memory.aclose()
    assert not (await memory_factory()).parts.upkeep.time_references.due
