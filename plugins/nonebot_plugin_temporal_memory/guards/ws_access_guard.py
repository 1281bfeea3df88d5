"""Says why a QQ client's WebSocket connection was refused, once a minute per address.

Without this, a client with a wrong or missing token gets HTTP 403 and the log shows only the
adapter's ``Authorization Header is invalid`` on every reconnect (NapCat retries every few
seconds); a client pointed at ``/onebot/v11`` instead of ``/onebot/v11/ws`` gets 403 from
Starlette (no route there) and the log shows nothing but uvicorn's ``403``. This ASGI
middleware stands before every WebSocket route:

- on the adapter's WebSocket routes, a handshake whose token the adapter would refuse (the same
  rule: ``Authorization: Bearer <token>`` or ``Token <token>`` equal to
  ``ONEBOT_ACCESS_TOKEN``) is refused here, with the same 403, naming the cause — no token
  sent, a token in the URL (which the adapter does not read), or a wrong token;
- a handshake on a path no route takes, which the app then refuses, is logged naming the
  address the client should use.

At most one line a minute per remote address (``asgi_guard.AddressThrottle``); the next line
for that address says how many were refused meanwhile. The token itself is never logged.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from nonebot import get_driver, get_plugin_config
from nonebot.adapters.onebot.utils import get_auth_bearer
from nonebot.adapters.onebot.v11.config import Config as OneBotConfig
from nonebot.drivers import Driver
from nonebot.log import logger
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .asgi_guard import AddressThrottle, route_path, server_app
from .ws_frame_guard import WS_PATHS

ADDRESS_HINT = "the client's address must end in /onebot/v11/ws, e.g. ws://HOST:PORT/onebot/v11/ws"


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return bytes(value).decode("latin-1")  # as Starlette (and so the adapter) reads it
    return None


def token_problem(scope: Scope, access_token: str) -> str | None:
    """Why the adapter would refuse this handshake's token, or ``None`` if it would take it."""
    sent = get_auth_bearer(_header(scope, b"authorization"))
    if sent == access_token:
        return None
    if sent is None:
        query = bytes(scope.get("query_string", b"")).decode("latin-1").lower()
        if "access_token=" in query:
            return (
                "the token came in the URL (?access_token=), which this bot does not read; "
                "put it in the client's token field (sent as Authorization: Bearer <token>)"
            )
        if _header(scope, b"authorization"):
            return (
                "the Authorization header is not 'Bearer <token>'; put the token in the "
                "client's token field"
            )
        return (
            "no token sent; put ONEBOT_ACCESS_TOKEN in the client's token field "
            "(NapCat: token, go-cqhttp: access-token, Lagrange: AccessToken)"
        )
    return "wrong token: the client's token differs from ONEBOT_ACCESS_TOKEN; use the same in both"


class WebSocketAccessGuard:
    """Refuses a wrong or missing token on the adapter's WebSocket routes and logs why; logs a
    handshake the app refused for want of a route. Everything else passes untouched."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: Callable[[], list[BaseRoute]],
        access_token: str | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self._routes = routes
        self._access_token = access_token
        self._warnings = AddressThrottle(clock)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            await self.app(scope, receive, send)
            return
        path = route_path(self._routes(), scope)
        if path in WS_PATHS:
            problem = token_problem(scope, self._access_token) if self._access_token else None
            if problem is None:
                await self.app(scope, receive, send)
                return
            self._warn(scope, problem)
            # Closed before it is accepted: the server answers the handshake with 403, as the
            # adapter would.
            await send({"type": "websocket.close", "code": 1008})
            return
        if path is not None:
            await self.app(scope, receive, send)  # another route's (not the adapter's)
            return
        await self.app(scope, receive, self._watching(scope, send))

    def _watching(self, scope: Scope, send: Send) -> Send:
        """``send`` that logs the wrong path when the app closes the handshake unaccepted."""
        answered = False

        async def watched(message: Message) -> None:
            nonlocal answered
            if message["type"] == "websocket.accept":
                answered = True
            elif message["type"] == "websocket.close" and not answered:
                answered = True
                self._warn(scope, f"no OneBot endpoint at this path; {ADDRESS_HINT}")
            await send(message)

        return watched

    def _warn(self, scope: Scope, problem: str) -> None:
        client = scope.get("client")
        address = str(client[0]) if client else "an unknown address"
        more = self._warnings.due(address)
        if more is None:
            return
        logger.warning(
            f"TemporalMemory refused a OneBot WebSocket connection from {address} to "
            f"{scope['path']}: {problem}"
            + (f" ({more} more refused from there since the last warning)" if more else "")
        )


def install_ws_access_guard(driver: Driver) -> bool:
    """Add the guard to the driver's app when it is a Starlette (FastAPI) app; True if added."""
    app = server_app(driver)
    if app is None:
        return False  # no WebSocket server of ours (forward WebSocket only, or another driver)
    access_token = get_plugin_config(OneBotConfig).onebot_access_token
    app.add_middleware(
        WebSocketAccessGuard, routes=lambda: app.router.routes, access_token=access_token
    )
    return True


install_ws_access_guard(get_driver())
