"""Refuses OneBot v11 events POSTed over HTTP unless ``ONEBOT_SECRET`` is set.

Beside its WebSocket, the OneBot v11 adapter takes events as HTTP POSTs on ``/onebot/v11/``,
``/onebot/v11/http`` and ``/onebot/v11/http/``. It checks ``ONEBOT_ACCESS_TOKEN`` only on the
WebSocket: a POST is checked only against an HMAC signature, and only when ``ONEBOT_SECRET`` is
set. Without a secret, anyone who reaches the port could post a message "from" any user — it
would be stored in that user's memory and answered through the real QQ connection, and a forged
superuser ``/forget all`` would delete everything.

So when no secret is set, this ASGI middleware answers those POSTs with 403 before the adapter
sees them; with a secret it is not installed and the adapter's signature check decides. It is
added to the FastAPI app while the plugin loads (Starlette refuses middleware once the app has
started), so it holds in any NoneBot project the plugin is loaded into, not only via ``bot.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from nonebot import get_driver, get_plugin_config
from nonebot.adapters.onebot.v11.config import Config as OneBotConfig
from nonebot.drivers import ASGIMixin, Driver
from nonebot.log import logger
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from .asgi_guard import WarningThrottle, route_path

EVENT_PATHS = frozenset({"/onebot/v11/", "/onebot/v11/http", "/onebot/v11/http/"})
"""The routes on which the OneBot v11 adapter takes events as HTTP POSTs."""

REFUSAL = (
    "OneBot events over HTTP POST are refused: this bot accepts them only when ONEBOT_SECRET "
    "is set and the request is signed (X-Signature). Connect over the WebSocket instead.\n"
)


class HttpEventGuard:
    """Pure ASGI middleware: 403 for every HTTP POST that would reach an adapter event route."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: Callable[[], list[BaseRoute]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self._routes = routes
        self._warnings = WarningThrottle(clock)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._reaches_event_route(scope):
            await self.app(scope, receive, send)
            return
        self._warn(scope)
        await PlainTextResponse(REFUSAL, status_code=403)(scope, receive, send)

    def _reaches_event_route(self, scope: Scope) -> bool:
        if scope["type"] != "http" or scope["method"] != "POST":
            return False
        return route_path(self._routes(), scope) in EVENT_PATHS

    def _warn(self, scope: Scope) -> None:
        more = self._warnings.due()
        if more is None:
            return
        client = scope.get("client")
        source = f"{client[0]}:{client[1]}" if client else "an unknown client"
        logger.warning(
            f"TemporalMemory refused an HTTP POST event to {scope['path']} from {source}"
            + (f" (and {more} more since the last warning)" if more else "")
            + ": events over HTTP are accepted only when ONEBOT_SECRET is set (and signed)"
        )


class HttpEventGuardError(RuntimeError):
    """The driver serves HTTP but the guard cannot be installed on it."""


def install_http_event_guard(driver: Driver) -> bool:
    """Add the guard to the driver's app unless ``ONEBOT_SECRET`` is set; True if added."""
    if not isinstance(driver, ASGIMixin):
        return False  # no HTTP server at all (forward WebSocket only)
    if get_plugin_config(OneBotConfig).onebot_secret:
        return False  # the adapter verifies every POST's signature itself
    app = driver.server_app
    if not isinstance(app, Starlette):
        raise HttpEventGuardError(
            "TemporalMemory can refuse unsigned OneBot HTTP POST events only on the FastAPI "
            "driver: use DRIVER=~fastapi, or set ONEBOT_SECRET"
        )
    app.add_middleware(HttpEventGuard, routes=lambda: app.router.routes)
    return True


install_http_event_guard(get_driver())
