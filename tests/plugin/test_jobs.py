"""The scheduled jobs: what the purge deletes, the distilled upkeep, when each is scheduled."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import asyncpg

from memory_core.models import TurnInput
from memory_core.settings import MemorySettings

EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)


async def test_purge_job_deletes_exactly_the_expired_rows(runtime: Any, fresh_dsn: str) -> None:
    from nonebot_plugin_temporal_memory.jobs import purge_expired_memory

    for text in ("过期的话", "没过期的话", "永久的话"):
        await runtime.memory.add_turn(TurnInput(user_id=1, role="user", content=text))
    conn = await asyncpg.connect(fresh_dsn)
    try:
        now = datetime.now(timezone.utc)
        await conn.execute(
            "UPDATE dialogues SET expires_at = $1 WHERE content = '过期的话'",
            now - timedelta(hours=1),  # expired longer ago than the short-term window
        )
        await conn.execute(
            "UPDATE dialogues SET expires_at = $1 WHERE content = '没过期的话'",
            now + timedelta(days=1),
        )
    finally:
        await conn.close()
    assert await purge_expired_memory() == 1
    left = await runtime.memory.recent_turns(1, None, limit=10, since=EPOCH)
    assert sorted(t.content for t in left) == ["永久的话", "没过期的话"]


async def test_purge_is_scheduled_daily_at_the_configured_time_and_soon_after_start(
    plugin: Any,
) -> None:
    from nonebot_plugin_apscheduler import scheduler

    from nonebot_plugin_temporal_memory.jobs import PURGE_JOB_ID, schedule_purge, unschedule_purge

    # Scheduling reads the settings only: no memory, no database.
    settings = MemorySettings(memory_purge_time="03:30")
    schedule_purge(settings)
    try:
        job = scheduler.get_job(PURGE_JOB_ID)
        assert job is not None
        fields = {f.name: str(f) for f in job.trigger.fields}
        assert (fields["hour"], fields["minute"]) == ("3", "30")
        assert str(job.trigger.timezone) == "Asia/Shanghai"
        # The first run is soon after start-up, not at the next 03:30.
        assert job.next_run_time <= datetime.now(timezone.utc) + timedelta(minutes=1)
    finally:
        unschedule_purge()
    assert scheduler.get_job(PURGE_JOB_ID) is None


async def test_distilled_maintenance_runs_and_is_scheduled_daily_after_the_purge(
    runtime: Any,
) -> None:
    from nonebot_plugin_apscheduler import scheduler

    from memory_core.distill.memory import ExtractedMemory
    from nonebot_plugin_temporal_memory.jobs import (
        MAINTENANCE_JOB_ID,
        maintain_distilled_memory,
        schedule_maintenance,
        unschedule_maintenance,
    )

    await runtime.memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content="用户住在北京", category="personal_info")], 1
    )
    assert await maintain_distilled_memory() is True

    settings = runtime.settings.model_copy(update={"memory_purge_time": "23:50"})
    schedule_maintenance(settings)
    try:
        job = scheduler.get_job(MAINTENANCE_JOB_ID)
        assert job is not None
        fields = {f.name: str(f) for f in job.trigger.fields}
        assert (fields["hour"], fields["minute"]) == ("0", "5")
        assert str(job.trigger.timezone) == "Asia/Shanghai"
    finally:
        unschedule_maintenance()
    assert scheduler.get_job(MAINTENANCE_JOB_ID) is None


async def test_distilled_maintenance_is_postponed_when_the_database_is_down(runtime: Any) -> None:
    from nonebot_plugin_temporal_memory.jobs import maintain_distilled_memory

    pool = runtime.memory.database.detach()  # as if the connection were lost
    try:
        assert await maintain_distilled_memory() is False
    finally:
        runtime.memory.database.attach(pool)
