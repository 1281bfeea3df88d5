"""The operator's web console at ``/memory/`` on the bot's own port (``MEMORY_CONSOLE_TOKEN``).

Mounted on NoneBot's FastAPI app while the plugin loads (like the ASGI guards), and only when
a token is set: without one the routes do not exist, whatever ``HOST`` is. The guards act on the
OneBot adapter's routes only (``http_event_guard``, ``ws_frame_guard``), so they neither block
nor open anything here.
"""

from __future__ import annotations

from nonebot import get_driver, get_plugin_config
from nonebot.drivers import ASGIMixin, Driver
from nonebot.log import logger
from pydantic import ValidationError
from starlette.applications import Starlette

from ..config import Config
from ..listener import is_loopback
from .access import MIN_TOKEN_CHARS, ConsoleAccess
from .access_log import hide_console_queries
from .pages import ConsoleApp
from .views import BASE

driver = get_driver()


class _State:
    enabled = False
    problem = "MEMORY_CONSOLE_TOKEN is empty"


def install_console(driver: Driver) -> bool:
    """Mount the console when a long enough token is set; True if mounted."""
    try:
        config = get_plugin_config(Config)
    except ValidationError:
        # The start-up check refuses these settings in one line (runtime.checked_configuration).
        _State.problem = "invalid settings"
        return False
    token = config.memory_console_token.get_secret_value() if config.memory_console_token else ""
    if not token:
        return False
    if len(token) < MIN_TOKEN_CHARS:
        _State.problem = f"MEMORY_CONSOLE_TOKEN is shorter than {MIN_TOKEN_CHARS} characters"
        return False
    if not isinstance(driver, ASGIMixin) or not isinstance(driver.server_app, Starlette):
        _State.problem = "the driver serves no FastAPI app (use DRIVER=~fastapi)"
        return False
    driver.server_app.mount(BASE, ConsoleApp(ConsoleAccess(token)).app())
    hide_console_queries(BASE)
    _State.enabled = True
    return True


@driver.on_startup
async def _announce() -> None:
    if not _State.enabled:
        logger.info(f"TemporalMemory console: off ({_State.problem})")
        return
    host, port = driver.config.host, driver.config.port
    shown = f"[{host}]" if ":" in str(host) else str(host)
    logger.info(
        f"TemporalMemory console: http://{shown}:{port}{BASE}/ (log in with MEMORY_CONSOLE_TOKEN)"
    )
    if not is_loopback(host):
        logger.warning(
            "TemporalMemory console: HOST is reachable from other machines and the console is "
            "plain HTTP; put it behind HTTPS (a reverse proxy) or reach it through an SSH tunnel"
        )


install_console(driver)
