"""The core owns time: the daily purge of expired rows and the distilled upkeep are steps of the
memory's own maintenance round (``background.DailySchedule``), whatever front end opened it —
the bot, or ``python -m memory_core mcp``, which purges on its own. The schedule is driven with
the moment it is told (burst mode), never a timer raced."""

from __future__ import annotations

import asyncio
from datetime import datetime, time, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import asyncpg

from memory_core.background import STEP_RETRY, DailySchedule, DailyStep, RepeatedStep
from memory_core.errors import DatabaseUnavailableError
from memory_core.models import TurnInput
from tests.core.test_mcp_stdio import stdio_memory

SHANGHAI = ZoneInfo("Asia/Shanghai")
# 2026-12-07 10:00 in Shanghai.
START = datetime(2026, 12, 7, 2, 0, tzinfo=timezone.utc)


class Step:
    def __init__(self, *failures: Exception) -> None:
        self.runs = 0
        self.failures = list(failures)

    async def __call__(self) -> None:
        self.runs += 1
        if self.failures:
            raise self.failures.pop(0)


def local(day: int, hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 12, day, hour, minute, tzinfo=SHANGHAI)


async def test_a_step_runs_on_start_if_asked_then_daily_at_its_local_time_once_however_late():
    purge, upkeep = Step(), Step()
    schedule = DailySchedule(
        [
            DailyStep("purge", purge, time(4, 0), on_start=True),
            DailyStep("upkeep", upkeep, time(4, 15)),
        ],
        SHANGHAI,
        now=START,
    )
    assert await schedule.run_due(START) == ["purge"]  # the first round after start
    assert await schedule.run_due(START + timedelta(minutes=1)) == []
    assert await schedule.run_due(local(8, 3, 59)) == []
    assert await schedule.run_due(local(8, 4, 0)) == ["purge"]
    assert await schedule.run_due(local(8, 4, 15)) == ["upkeep"]
    # A machine asleep for two days runs each once, then goes by the clock again.
    assert await schedule.run_due(local(10, 9, 0)) == ["purge", "upkeep"]
    assert schedule.next_run("purge") == local(11, 4, 0)
    assert (purge.runs, upkeep.runs) == (3, 2)


async def test_a_failed_step_is_tried_again_later_and_the_others_still_run():
    purge, upkeep = Step(DatabaseUnavailableError("away")), Step()
    schedule = DailySchedule(
        [
            DailyStep("purge", purge, time(4, 0), on_start=True),
            DailyStep("upkeep", upkeep, time(4, 15), on_start=True),
        ],
        SHANGHAI,
        now=START,
    )
    assert await schedule.run_due(START) == ["upkeep"]
    assert await schedule.run_due(START + STEP_RETRY - timedelta(seconds=1)) == []
    assert await schedule.run_due(START + STEP_RETRY) == ["purge"]
    assert purge.runs == 2


async def expire(dsn: str, content: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "UPDATE dialogues SET expires_at = now() - interval '1 day' WHERE content = $1",
            content,
        )
    finally:
        await conn.close()


async def contents(dsn: str) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        return sorted(r["content"] for r in await conn.fetch("SELECT content FROM dialogues"))
    finally:
        await conn.close()


async def test_a_maintenance_round_purges_at_start_and_then_at_the_purge_time(
    memory_factory, fresh_dsn: str
):
    memory = await memory_factory(memory_purge_time="04:00")
    for text in ("过期的话", "留着的话", "明天过期的话"):
        await memory.parts.writer.add_turn(TurnInput(user_id=1, role="user", content=text))
    await expire(fresh_dsn, "过期的话")

    await memory.maintenance_round()  # the loop's first round: the purge is due at start

    assert await contents(fresh_dsn) == ["明天过期的话", "留着的话"]
    await expire(fresh_dsn, "明天过期的话")
    await memory.maintenance_round()  # not before its time
    assert await contents(fresh_dsn) == ["明天过期的话", "留着的话"]
    at = memory.daily.next_run("memory purge")
    assert at.astimezone(memory.parts.settings.tz).time() == time(4, 0)
    # (Opened between 04:00 and 04:15, the upkeep was still due today and runs with it.)
    assert (await memory.daily.run_due(at))[0] == "memory purge"
    assert await contents(fresh_dsn) == ["留着的话"]
    # The distilled upkeep a quarter of an hour after the purge, not on start.
    upkeep_at = memory.daily.next_run("distilled memory upkeep")
    assert upkeep_at - at == timedelta(minutes=15)
    assert await memory.daily.run_due(upkeep_at) == ["distilled memory upkeep"]


async def test_the_mcp_stdio_server_purges_expired_rows_on_its_own(
    memory_factory, fresh_dsn: str, tmp_data_dir: Path
):
    memory = await memory_factory()
    for text in ("过期的话", "留着的话"):
        await memory.parts.writer.add_turn(TurnInput(user_id=1, role="user", content=text))
    await memory.aclose()
    await expire(fresh_dsn, "过期的话")
    conn = await asyncpg.connect(fresh_dsn)
    try:  # stored by the test's embedder: left for the server's own model to embed
        await conn.execute("UPDATE dialogues SET embedding = NULL, embedding_model = NULL")
    finally:
        await conn.close()

    async with stdio_memory(fresh_dsn, tmp_data_dir) as client:
        await client.list_tools()  # the server is up, its memory open
        # Nothing is asked of it: its own maintenance purges (waited for, not timed).
        for _ in range(600):
            if await contents(fresh_dsn) == ["留着的话"]:
                break
            await asyncio.sleep(0.2)
        assert await contents(fresh_dsn) == ["留着的话"]


async def test_a_repeated_step_runs_at_the_first_round_then_once_its_interval_has_passed():
    """The picture reader's retries: added after the memory opened, due at once, then a minute
    after each run; a failed run is tried again at its next time, not the daily steps' later."""
    schedule = DailySchedule([DailyStep("purge", Step(), time(4, 0))], SHANGHAI, now=START)
    retries = Step(DatabaseUnavailableError("away"))
    schedule.add(RepeatedStep("picture retries", retries, timedelta(minutes=1)), now=START)
    assert await schedule.run_due(START) == []  # failed: tried again a minute later
    assert await schedule.run_due(START + timedelta(seconds=30)) == []
    assert await schedule.run_due(START + timedelta(seconds=61)) == ["picture retries"]
    assert await schedule.run_due(START + timedelta(seconds=90)) == []
    assert await schedule.run_due(START + timedelta(seconds=125)) == ["picture retries"]
    assert retries.runs == 3
