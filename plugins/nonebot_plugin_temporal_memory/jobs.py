"""Scheduled work (nonebot-plugin-apscheduler): the purge of expired memories, daily at
``MEMORY_PURGE_TIME`` and once soon after start-up, and the upkeep of distilled memory (merge
near-duplicates, refresh importance, drop expired cached answers) daily a little later."""

from datetime import datetime, timedelta

from nonebot import get_driver, require
from nonebot.log import logger

require("nonebot_plugin_apscheduler")

from nonebot_plugin_apscheduler import scheduler  # noqa: E402

from memory_core import MemoryCoreError, MemorySettings  # noqa: E402

from .runtime import get_runtime  # noqa: E402

driver = get_driver()

PURGE_JOB_ID = "temporal_memory_purge"
MAINTENANCE_JOB_ID = "temporal_memory_distilled_maintenance"
# Start-up is busy (database, embedding model, the client connecting); purge a little later.
FIRST_PURGE_DELAY = timedelta(seconds=30)
# After the purge, so the upkeep does not merge or re-rank what is about to be deleted.
MAINTENANCE_AFTER_PURGE = timedelta(minutes=15)


async def purge_expired_memory() -> int:
    """Delete expired memories now; returns how many (0 when the database is unreachable)."""
    try:
        deleted = await get_runtime().memory.purge_expired()
    except MemoryCoreError as exc:
        logger.warning(f"memory purge postponed: {exc}")
        return 0
    logger.info(f"memory purge: {deleted} expired row(s) deleted")
    return deleted


async def maintain_distilled_memory() -> bool:
    """Run the daily upkeep of distilled memory now; False when it had to be postponed."""
    try:
        report = await get_runtime().memory.maintain_distilled()
    except MemoryCoreError as exc:
        logger.warning(f"distilled memory maintenance postponed: {exc}")
        return False
    logger.info(
        f"distilled memory maintenance: {report.merged} merged, "
        f"{report.importance_refreshed} importance refreshed, {report.embedded} embedded"
    )
    return True


# NoneBot runs start-up hooks in registration order (shutdown hooks in reverse): this module
# imports .runtime first, so the runtime is open here and still open when the job is removed.
@driver.on_startup
async def _schedule() -> None:
    settings = get_runtime().settings
    schedule_purge(settings)
    schedule_maintenance(settings)


@driver.on_shutdown
async def _unschedule() -> None:
    unschedule_purge()
    unschedule_maintenance()


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


def maintenance_time(purge_time: str) -> tuple[int, int]:
    """(hour, minute) of the daily upkeep: ``MAINTENANCE_AFTER_PURGE`` after the purge."""
    hour, _, minute = purge_time.partition(":")
    at = datetime(2000, 1, 1, int(hour), int(minute)) + MAINTENANCE_AFTER_PURGE
    return at.hour, at.minute


def schedule_maintenance(settings: MemorySettings) -> None:
    hour, minute = maintenance_time(settings.memory_purge_time)
    scheduler.add_job(
        maintain_distilled_memory,
        "cron",
        hour=hour,
        minute=minute,
        timezone=settings.tz,
        id=MAINTENANCE_JOB_ID,
        replace_existing=True,
        misfire_grace_time=3600,
        coalesce=True,
    )
    logger.info(f"distilled memory maintenance scheduled daily at {hour:02d}:{minute:02d}")


def unschedule_maintenance() -> None:
    if scheduler.get_job(MAINTENANCE_JOB_ID) is not None:
        scheduler.remove_job(MAINTENANCE_JOB_ID)
