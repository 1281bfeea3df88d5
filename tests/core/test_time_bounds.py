"""Times outside the range the memory accepts never reach the database, and rows stored with such
times before migration 013 are repaired by it, so neither can stop a reply or an upkeep loop."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import asyncpg
import pytest

from memory_core.distill.memory import ExtractedMemory
from memory_core.errors import InvalidTurnError
from memory_core.lang.timerange import referred_range
from memory_core.models import TurnInput
from memory_core.recall.options import RecallOptions
from memory_core.storage.database import apply_migrations
from memory_core.time_bounds import check_time, time_problem
from memory_core.transfer.importer import import_json_lines

UTC = timezone.utc
SHANGHAI = timezone(timedelta(hours=8))


@pytest.mark.parametrize(
    "moment",
    [
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(1989, 12, 31, 23, 59, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime.max.replace(tzinfo=timezone(timedelta(hours=-12))),
    ],
)
def test_times_outside_the_range_are_refused_naming_the_field(moment: datetime):
    assert time_problem(moment) is not None
    with pytest.raises(ValueError, match="created_at"):
        check_time(moment, "created_at")


def test_a_said_time_may_lie_at_most_a_day_ahead_of_now():
    now = datetime(2026, 12, 2, 12, tzinfo=UTC)
    assert time_problem(now + timedelta(hours=23), now=now) is None
    assert time_problem(now + timedelta(days=2), now=now) is not None
    assert time_problem(now + timedelta(days=2)) is None  # an expiry may lie further ahead


def test_a_text_naming_a_date_past_the_range_refers_to_no_time():
    said = datetime(2026, 12, 2, 12, tzinfo=UTC)
    assert referred_range("3000年1月1日我们去月球", said, SHANGHAI) is None
    assert referred_range("明天见", said, SHANGHAI) is not None


async def test_a_turn_dated_outside_the_range_is_refused_and_nothing_is_stored(memory_factory):
    memory = await memory_factory()
    for moment in (datetime(1, 1, 1, tzinfo=UTC), datetime.now(UTC) + timedelta(days=3)):
        turn = TurnInput(user_id=7, role="user", content="坏时间", created_at=moment)
        with pytest.raises(InvalidTurnError, match="created_at"):
            await memory.parts.writer.add_turn(turn)
    async with memory.parts.database.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM dialogues") == 0


async def test_an_import_skips_lines_dated_at_the_calendars_ends_and_the_person_still_gets_replies(
    memory_factory,
):
    memory = await memory_factory()

    def turn(text: str, at: str) -> dict[str, object]:
        return {"user_id": 7, "role": "user", "content": text, "created_at": at}

    fact = {"type": "memory", "kind": "facts", "user_id": 7, "content": "用户喜欢潜水"}
    lines = [
        (1, turn("我喜欢潜水", "0001-01-01T00:00:00+00:00")),
        (2, turn("我也喜欢爬山", "9999-12-31T23:59:59.999999+00:00")),
        (3, turn("周末去爬山了", "2026-11-30T10:00:00+08:00")),
        (4, {**fact, "first_seen": "0001-01-01T00:00:00+00:00"}),
    ]
    report = await import_json_lines(memory.parts, lines)
    assert [p.line for p in report.problems] == [1, 2, 4]
    assert all("1990-01-01" in p.reason or "2200-01-01" in p.reason for p in report.problems)
    assert report.new == 1
    result = await memory.parts.retriever.recall(
        7, "爬山", options=RecallOptions(now=datetime.now(UTC))
    )
    assert [t.content for t in result.turns] == ["周末去爬山了"]


DROP_013 = (
    "ALTER TABLE dialogues DROP CONSTRAINT dialogues_created_at_in_range,"
    " DROP CONSTRAINT dialogues_expires_at_in_range, DROP CONSTRAINT dialogues_refers_in_range;"
    " ALTER TABLE distilled_memories DROP CONSTRAINT distilled_times_in_range,"
    " DROP CONSTRAINT distilled_valid_until_in_range;"
    " DELETE FROM schema_migrations WHERE version = 13"
)


async def test_migration_013_repairs_infinite_times_and_the_person_gets_replies_again(
    memory_factory,
):
    memory = await memory_factory()
    for text in ("负无穷时说的话", "正无穷时说的话", "正常时说的话"):
        await memory.parts.writer.add_turn(TurnInput(user_id=7, role="user", content=text))
    await memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content="用户喜欢潜水")], 7, stated_at=datetime.now(UTC)
    )
    async with memory.parts.database.pool.acquire() as conn:
        # A database from before 013, holding what an old import wrote.
        await conn.execute(DROP_013)
        await conn.execute(
            "UPDATE dialogues SET created_at = '-infinity', expires_at = 'infinity'"
            " WHERE content = '负无穷时说的话'"
        )
        await conn.execute(
            "UPDATE dialogues SET created_at = 'infinity' WHERE content = '正无穷时说的话'"
        )
        await conn.execute(
            "UPDATE distilled_memories SET first_seen = '-infinity', last_confirmed = 'infinity'"
        )
        assert await apply_migrations(conn) == ["013_sane_times.sql"]
        times = await conn.fetch(
            "SELECT content, created_at, expires_at FROM dialogues ORDER BY id"
        )
        fact = await conn.fetchrow("SELECT first_seen, last_confirmed FROM distilled_memories")
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(
                "UPDATE dialogues SET created_at = '-infinity' WHERE content = '正常时说的话'"
            )
    for row in times:
        assert row["created_at"].tzinfo is not None
        assert time_problem(row["created_at"], now=datetime.now(UTC)) is None
    assert times[0]["created_at"] == datetime(1990, 1, 1, tzinfo=UTC)
    assert times[0]["expires_at"] is None  # "never", as infinity meant
    assert all(time_problem(t) is None for t in fact)
    result = await memory.parts.retriever.recall(
        7, "说的话", options=RecallOptions(now=datetime.now(UTC))
    )
    assert {t.content for t in result.turns} >= {"负无穷时说的话", "正无穷时说的话"}
