"""Drops WebSocket frames the OneBot v11 adapter cannot read, instead of losing the connection.

The adapter's WebSocket loop (``Adapter._handle_ws``) passes every frame to ``json.loads``; one
malformed, undecodable binary or too deeply nested frame raises there, which ends the loop and
closes the connection, and the OneBot client must reconnect. This ASGI middleware stands between
the server and the adapter's WebSocket routes: a frame that ``json.loads`` cannot read is logged
and skipped, so the adapter only ever receives frames it can parse. A frame that passes here
parses in the adapter too: the same function on the same data, called there with a shallower
stack (this check runs inside the adapter's ``receive``).

It is added to the FastAPI app while the plugin loads, like ``http_event_guard``, so it holds in
any NoneBot project the plugin is loaded into; on another driver it is not installed. The
forward WebSocket (ONEBOT_WS_URLS, the bot dialling the client) does not pass through this app:
there an unreadable frame still ends the connection, and the adapter dials again by itself.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from nonebot import get_driver
from nonebot.drivers import ASGIMixin, Driver
from nonebot.log import logger
from starlette.applications import Starlette
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .asgi_guard import WarningThrottle, route_path

WS_PATHS = frozenset({"/onebot/v11/", "/onebot/v11/ws", "/onebot/v11/ws/"})
"""The routes on which the OneBot v11 adapter takes reverse WebSocket connections."""


def readable(message: Message) -> bool:
    """Whether the adapter can ``json.loads`` this ``websocket.receive`` message's frame."""
    text = message.get("text")
    data = text if text is not None else message.get("bytes")
    if data is None:
        return False
    try:
        json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return False
    return True


class WebSocketFrameGuard:
    """Pure ASGI middleware: unreadable frames on the adapter's WebSocket routes are skipped."""

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
        if not self._reaches_ws_route(scope):
            await self.app(scope, receive, send)
            return

        async def readable_frames() -> Message:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive" or readable(message):
                    return message
                self._warn(scope, message)

        await self.app(scope, readable_frames, send)

    def _reaches_ws_route(self, scope: Scope) -> bool:
        if scope["type"] != "websocket":
            return False
        return route_path(self._routes(), scope) in WS_PATHS

    def _warn(self, scope: Scope, message: Message) -> None:
        more = self._warnings.due()
        if more is None:
            return
        kind = "text" if message.get("text") is not None else "binary"
        logger.warning(
            f"TemporalMemory dropped an unreadable {kind} WebSocket frame on {scope['path']}"
            + (f" (and {more} more since the last warning)" if more else "")
            + ": not JSON, or nested too deeply; the connection stays open"
        )


def install_ws_frame_guard(driver: Driver) -> bool:
    """Add the guard to the driver's app when it is a Starlette (FastAPI) app; True if added."""
    if not isinstance(driver, ASGIMixin) or not isinstance(driver.server_app, Starlette):
        return False  # no WebSocket server of ours to guard
    app = driver.server_app
    app.add_middleware(WebSocketFrameGuard, routes=lambda: app.router.routes)
    return True


install_ws_frame_guard(get_driver())
