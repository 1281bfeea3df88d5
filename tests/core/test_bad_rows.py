"""A stored turn whose time is outside the range (migration 013's constraints dropped, as a
restore without them would leave them) breaks no read a reply, the console or an upkeep round
makes; it is left out, and /memstat counts it."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

import pytest

from memory_core.console.dashboard import storage_section
from memory_core.dialogue.bad_rows import usable_time
from memory_core.dialogue.recall_store import PgRecallStore
from memory_core.dialogue.time_references import TimeReferenceBackfill
from memory_core.dialogue.upkeep_store import PgUpkeepStore
from memory_core.models import TurnInput
from memory_core.recall.options import RecallOptions

UTC = timezone.utc
DROP_CONSTRAINTS = (
    "ALTER TABLE dialogues DROP CONSTRAINT dialogues_created_at_in_range,"
    " DROP CONSTRAINT dialogues_expires_at_in_range"
)
BAD_TIMES = [
    ("负无穷时说的话", "created_at = '-infinity'"),
    ("元年说的话", "created_at = '0001-01-01 00:00:00+00'"),
    ("万年说的话", "created_at = '9999-12-31 23:59:59.999999+00'"),
    ("永不过期说的话", "expires_at = 'infinity'"),
]


@pytest.fixture
async def bad_memory(memory_factory):
    memory = await memory_factory()
    for text, _ in [*BAD_TIMES, ("正常时说的话", "")]:
        await memory.parts.writer.add_turn(TurnInput(user_id=7, role="user", content=text))
    async with memory.parts.database.pool.acquire() as conn:
        await conn.execute(DROP_CONSTRAINTS)
        for text, change in BAD_TIMES:
            await conn.execute(f"UPDATE dialogues SET {change} WHERE content = $1", text)
    return memory


async def test_a_bad_row_is_left_out_of_recall_and_the_short_term_window(bad_memory, caplog):
    now = datetime.now(UTC)
    with caplog.at_level(logging.WARNING, logger="memory_core.dialogue.bad_rows"):
        result = await bad_memory.parts.retriever.recall(
            7, "说的话", options=RecallOptions(now=now)
        )
        again = await bad_memory.parts.retriever.recall(7, "说的话", options=RecallOptions(now=now))
        tail = await bad_memory.parts.database.store(PgRecallStore).session_tail(
            "7", since=now - timedelta(days=1), now=now + timedelta(days=1), limit=10
        )
        recent = await bad_memory.parts.retriever.recent_turns(
            7, None, limit=10, since=datetime(1990, 1, 1, tzinfo=UTC)
        )
    assert {t.content for t in result.turns} == {"正常时说的话"}
    assert {t.content for t in again.turns} == {"正常时说的话"}
    assert [t.content for t in tail.recent] == ["正常时说的话"]
    assert [t.content for t in recent] == ["正常时说的话"]
    assert tail.last_turn_at is not None and tail.last_turn_at.tzinfo is not None
    # Each bad row read is logged once, however often it is read (the year-9999 one lies past
    # every "now" these reads ask with, so they never read it).
    logged = [r.args[0] for r in caplog.records if "outside" in r.getMessage()]  # type: ignore[index]
    assert len(logged) == len(set(logged)) == len(BAD_TIMES) - 1


async def test_memstat_counts_the_bad_rows_and_shows_only_good_times(bad_memory):
    stats = await bad_memory.stats()
    assert stats.store.bad_times == len(BAD_TIMES)
    assert stats.store.oldest is not None and stats.store.oldest.tzinfo is not None
    assert stats.store.newest is not None and stats.store.newest.year < 2200
    assert any("时间超出范围" in line and "4 条" in line for line in storage_section(stats, UTC))
    assert any("时间超出范围" in line for line in stats.lines_zh(UTC))


async def test_the_time_reference_walk_passes_a_bad_row(bad_memory):
    walk = TimeReferenceBackfill(UTC)
    walk.after = 0
    store = bad_memory.parts.database.store(PgUpkeepStore)
    assert await walk.run(store) is True


@pytest.mark.parametrize(
    ("value", "usable"),
    [
        (datetime(2026, 12, 2, tzinfo=UTC), True),
        (datetime(1990, 1, 1, tzinfo=UTC), True),
        (datetime.min, False),  # -infinity as asyncpg reads it
        (datetime.max, False),
        (datetime(2026, 12, 2), False),  # no zone
        (datetime(2200, 1, 1, tzinfo=UTC), False),
        (None, False),
    ],
)
def test_usable_times_are_aware_and_inside_the_range(value: object, usable: bool):
    assert usable_time(value) is usable
