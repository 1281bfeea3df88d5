"""Start the bot: `python bot.py` (or `make run`). Settings come from `.env.prod` + environment."""

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import nonebot
from nonebot.adapters.onebot.v11 import Adapter as OneBotV11Adapter
from nonebot.log import default_filter, logger, logger_id
from pydantic import ValidationError

from memory_core.settings import validation_problems

if TYPE_CHECKING:
    from loguru import Record

DEFAULT_TIMEZONE = "Asia/Shanghai"  # MemorySettings.memory_timezone's default


class LogClock:
    """Stamps every log line with the full date and time in MEMORY_TIMEZONE, with its offset.

    NoneBot's default line starts ``11-30 21:57:10``: the machine's local time, no year, no
    zone, while the bot's users and its memory lines live in MEMORY_TIMEZONE. ``install``
    replaces NoneBot's default handler only (this is the project's own start script; a plugin
    must not reconfigure another project's log) and keeps its level filter (LOG_LEVEL) and
    layout. It is installed before ``nonebot.init()`` (whose first lines only the environment
    can time) and told the configured zone once the config is read.
    """

    def __init__(self, zone_name: str) -> None:
        self.zone = ZoneInfo(zone_name)

    def line_format(self, record: "Record") -> str:
        stamp = record["time"].astimezone(self.zone).isoformat(sep=" ", timespec="seconds")
        # NoneBot's layout; a format function must ask for the traceback itself.
        return (
            f"<g>{stamp}</g> "
            + "[<lvl>{level}</lvl>] <c><u>{name}</u></c> | {message}\n{exception}"
        )

    def install(self) -> None:
        logger.remove(logger_id)
        logger.add(
            sys.stdout, level=0, diagnose=False, filter=default_filter, format=self.line_format
        )


def refuse_to_start(problems: str) -> NoReturn:
    """NoneBot's own settings (``PORT``, ``DRIVER``…), the adapter's and the log's time zone
    are read before the plugin loads: a bad value ends the start here in one line and exit
    code 1, as the plugin's checks do (``nonebot_plugin_temporal_memory.startup_checks``),
    instead of a traceback."""
    logger.error(
        f"TemporalMemory 拒绝启动：设置有误 / refuses to start, invalid setting: {problems}. "
        "Fix it in .env.prod or the environment"
    )
    sys.exit(1)


def time_zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        refuse_to_start(f"MEMORY_TIMEZONE: {name!r} is not a time zone (e.g. Asia/Shanghai)")


log_clock = LogClock(DEFAULT_TIMEZONE)
log_clock.install()
log_clock.zone = time_zone(os.environ.get("MEMORY_TIMEZONE") or DEFAULT_TIMEZONE)

try:
    nonebot.init()
    driver = nonebot.get_driver()
    driver.register_adapter(OneBotV11Adapter)
except ValidationError as exc:
    refuse_to_start(validation_problems(exc))
log_clock.zone = time_zone(getattr(driver.config, "memory_timezone", "") or DEFAULT_TIMEZONE)

nonebot.load_from_toml(str(Path(__file__).with_name("pyproject.toml")))

if __name__ == "__main__":
    # The plugin shows the core's log and lets SIGTERM end the bot normally, in any NoneBot
    # project (nonebot_plugin_temporal_memory.runtime).
    nonebot.run()
