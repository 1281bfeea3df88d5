"""Scheduled work: the purge of expired memories, daily at ``MEMORY_PURGE_TIME`` and once soon
after start-up (nonebot-plugin-apscheduler)."""

from datetime import datetime, timedelta

from nonebot import get_driver, require
from nonebot.log import logger

require("nonebot_plugin_apscheduler")

from nonebot_plugin_apscheduler import scheduler  # noqa: E402

from memory_core.errors import MemoryCoreError  # noqa: E402
from memory_core.settings import MemorySettings  # noqa: E402

from .runtime import get_runtime  # noqa: E402

driver = get_driver()

PURGE_JOB_ID = "temporal_memory_purge"
# Start-up is busy (database, embedding model, the client connecting); purge a little later.
FIRST_PURGE_DELAY = timedelta(seconds=30)


async def purge_expired_memory() -> int:
    """Delete expired memories now; returns how many (0 when the database is unreachable)."""
    try:
        deleted = await get_runtime().memory.purge_expired()
    except MemoryCoreError as exc:
        logger.warning(f"memory purge postponed: {exc}")
        return 0
    logger.info(f"memory purge: {deleted} expired row(s) deleted")
    return deleted


# NoneBot runs start-up hooks in registration order (shutdown hooks in reverse): this module
# imports .runtime first, so the runtime is open here and still open when the job is removed.
@driver.on_startup
async def _schedule() -> None:
    schedule_purge(get_runtime().settings)


@driver.on_shutdown
async def _unschedule() -> None:
    unschedule_purge()


def schedule_purge(settings: MemorySettings) -> None:
    hour, _, minute = settings.memory_purge_time.partition(":")
    scheduler.add_job(
        purge_expired_memory,
        "cron",
        hour=int(hour),
        minute=int(minute),
        timezone=settings.tz,
        id=PURGE_JOB_ID,
        replace_existing=True,
        next_run_time=datetime.now(settings.tz) + FIRST_PURGE_DELAY,
        misfire_grace_time=3600,
        coalesce=True,
    )
    logger.info(
        f"memory purge scheduled daily at {settings.memory_purge_time} "
        f"({settings.memory_timezone}) and once {FIRST_PURGE_DELAY.seconds} s after start-up"
    )


def unschedule_purge() -> None:
    if scheduler.get_job(PURGE_JOB_ID) is not None:
        scheduler.remove_job(PURGE_JOB_ID)
