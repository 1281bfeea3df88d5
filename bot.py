"""Start the bot: `python bot.py` (or `make run`). Settings come from `.env.prod` + environment."""

import os
import sys
from collections.abc import Callable
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

    Once the config is read, ``at_level`` gives the handler LOG_LEVEL itself too, which prints
    the same lines: loguru then drops a line below it at the call (NoneBot's own handler takes
    every level and filters after the record is built, ~15 trace and debug records a message).
    """

    def __init__(self, zone_name: str) -> None:
        self.zone = ZoneInfo(zone_name)
        self.keep: Callable[[Record], bool] = default_filter  # the handler's filter
        self._level: int | str = 0
        self._handler: int | None = None

    def line_format(self, record: "Record") -> str:
        stamp = record["time"].astimezone(self.zone).isoformat(sep=" ", timespec="seconds")
        # NoneBot's layout; a format function must ask for the traceback itself.
        return (
            f"<g>{stamp}</g> "
            + "[<lvl>{level}</lvl>] <c><u>{name}</u></c> | {message}\n{exception}"
        )

    def install(self, level: int | str | None = None) -> None:
        """(Re)place the handler, at ``level`` or the level it had."""
        self._level = self._level if level is None else level
        logger.remove(logger_id if self._handler is None else self._handler)
        self._handler = logger.add(
            sys.stdout, level=self._level, diagnose=False, filter=self.keep, format=self.line_format
        )

    def at_level(self, level: int | str) -> None:
        """Let loguru drop lines below ``level`` (LOG_LEVEL) before building them; a level
        loguru does not know is left to the filter, as before."""
        try:
            if isinstance(level, str):
                logger.level(level)
        except ValueError:
            return
        self.install(level)


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
log_clock.at_level(driver.config.log_level)

nonebot.load_from_toml(str(Path(__file__).with_name("pyproject.toml")))

# What people say stays out of the log: NoneBot's line for each message keeps its ids and the
# text's length (the plugin's log_redaction, importable once the plugin is loaded).
from nonebot_plugin_temporal_memory.log_redaction import hiding_message_text  # noqa: E402

log_clock.keep = hiding_message_text(default_filter)
log_clock.install()

if __name__ == "__main__":
    # The plugin shows the core's log and lets SIGTERM end the bot normally, in any NoneBot
    # project (nonebot_plugin_temporal_memory.runtime). The server's limits and which proxies
    # it believes: nonebot_plugin_temporal_memory.guards.server_limits.
    from nonebot_plugin_temporal_memory.guards.server_limits import server_options

    nonebot.run(**server_options(driver.config))
