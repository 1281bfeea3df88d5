"""Drops WebSocket frames the OneBot v11 adapter cannot read, instead of losing the connection.

The adapter's WebSocket loop (``Adapter._handle_ws``) passes every frame to ``json.loads``; one
malformed, undecodable binary or too deeply nested frame raises there, which ends the loop and
closes the connection, and the OneBot client must reconnect. This ASGI middleware stands between
the server and the adapter's WebSocket routes: a frame that ``json.loads`` cannot read is logged
and skipped, so the adapter only ever receives frames it can parse; a message segment whose
``data`` is ``null`` gets ``{}`` (NoneBot's event logging would raise on it). A frame that
passes here parses in the adapter too: the same function on the same data, called there with a
shallower stack (this check runs inside the adapter's ``receive``).

It is added to the FastAPI app while the plugin loads, like ``http_event_guard``, so it holds in
any NoneBot project the plugin is loaded into; on another driver it is not installed. The
forward WebSocket (ONEBOT_WS_URLS, the bot dialling the client) does not pass through this app:
there an unreadable frame still ends the connection, and the adapter dials again by itself.
A frame's size is bounded before it gets here, by the server (``server_limits.WS_MAX_BYTES``).
"""

from __future__ import annotations

import json

from nonebot import get_driver
from nonebot.drivers import Driver
from nonebot.log import logger
from starlette.types import Message, Receive, Scope, Send

from .asgi_guard import AdapterRouteGuard, server_app, without_null_data

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


class WebSocketFrameGuard(AdapterRouteGuard):
    """Unreadable frames on the adapter's WebSocket routes are skipped; segments with
    ``"data": null`` get ``{}`` (``asgi_guard.without_null_data``)."""

    scope_type = "websocket"
    paths = WS_PATHS

    async def guard(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def readable_frames() -> Message:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    return message
                if readable(message):
                    return _repaired(message)
                self._warn(scope, message)

        await self.app(scope, readable_frames, send)

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


def _repaired(message: Message) -> Message:
    key = "text" if message.get("text") is not None else "bytes"
    repaired = without_null_data(message[key])
    return message if repaired is None else {**message, key: repaired}


def install_ws_frame_guard(driver: Driver) -> bool:
    """Add the guard to the driver's app when it is a Starlette (FastAPI) app; True if added."""
    app = server_app(driver)
    if app is None:
        return False  # no WebSocket server of ours to guard
    app.add_middleware(WebSocketFrameGuard, routes=lambda: app.router.routes)
    return True


install_ws_frame_guard(get_driver())
