"""Refuses OneBot v11 events POSTed over HTTP unless ``ONEBOT_SECRET`` is set.

Beside its WebSocket, the OneBot v11 adapter takes events as HTTP POSTs on ``/onebot/v11/``,
``/onebot/v11/http`` and ``/onebot/v11/http/``. It checks ``ONEBOT_ACCESS_TOKEN`` only on the
WebSocket: a POST is checked only against an HMAC signature, and only when ``ONEBOT_SECRET`` is
set. Without a secret, anyone who reaches the port could post a message "from" any user — it
would be stored in that user's memory and answered through the real QQ connection, and a forged
superuser ``/forget all`` would delete everything.

So when no secret is set, this ASGI middleware answers those POSTs with 403 before the adapter
sees them; with a secret the adapter's signature check decides, and ``SignedEventRepair`` only
gives a correctly signed event's ``"data": null`` segments ``{}`` (as ``ws_frame_guard`` does on
the WebSocket) and signs the repaired body again. It is
added to the FastAPI app while the plugin loads (Starlette refuses middleware once the app has
started), so it holds in any NoneBot project the plugin is loaded into, not only via ``bot.py``.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable

from nonebot import get_driver, get_plugin_config
from nonebot.adapters.onebot.v11.config import Config as OneBotConfig
from nonebot.drivers import ASGIMixin, Driver
from nonebot.log import logger
from starlette.responses import PlainTextResponse
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .asgi_guard import AdapterRouteGuard, server_app, without_null_data

EVENT_PATHS = frozenset({"/onebot/v11/", "/onebot/v11/http", "/onebot/v11/http/"})
"""The routes on which the OneBot v11 adapter takes events as HTTP POSTs."""

REFUSAL = (
    "OneBot events over HTTP POST are refused: this bot accepts them only when ONEBOT_SECRET "
    "is set and the request is signed (X-Signature). Connect over the WebSocket instead.\n"
)


class HttpEventGuard(AdapterRouteGuard):
    """403 for every HTTP POST that would reach an adapter event route."""

    scope_type = "http"
    paths = EVENT_PATHS

    def concerns(self, scope: Scope) -> bool:
        return bool(scope["method"] == "POST")

    async def guard(self, scope: Scope, receive: Receive, send: Send) -> None:
        self._warn(scope)
        await PlainTextResponse(REFUSAL, status_code=403)(scope, receive, send)

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


class SignedEventRepair(AdapterRouteGuard):
    """With ``ONEBOT_SECRET``: a correctly signed event POST whose segments have ``"data":
    null`` reaches the adapter with ``{}`` instead, signed again with the same secret (the
    adapter checks the signature over the body it gets). Anything else passes as it came, so
    the adapter's own signature check still decides."""

    scope_type = "http"
    paths = EVENT_PATHS

    def __init__(self, app: ASGIApp, *, routes: Callable[[], list[BaseRoute]], secret: str) -> None:
        super().__init__(app, routes=routes)
        self._secret = secret.encode("utf-8")

    def concerns(self, scope: Scope) -> bool:
        return bool(scope["method"] == "POST")

    def _signature(self, body: bytes) -> bytes:
        return b"sha1=" + hmac.new(self._secret, body, "sha1").hexdigest().encode("ascii")

    async def guard(self, scope: Scope, receive: Receive, send: Send) -> None:
        body, more_body = b"", True
        while more_body:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([message], receive), send)
                return
            body += message.get("body", b"")
            more_body = message.get("more_body", False)
        headers = dict(scope["headers"])
        repaired = without_null_data(body)
        signed = hmac.compare_digest(headers.get(b"x-signature", b""), self._signature(body))
        if isinstance(repaired, bytes) and signed:
            body = repaired
            kept = [(k, v) for k, v in scope["headers"] if k not in _REWRITTEN]
            scope = {
                **scope,
                "headers": [
                    *kept,
                    (b"x-signature", self._signature(body)),
                    (b"content-length", str(len(body)).encode("ascii")),
                ],
            }
        request = {"type": "http.request", "body": body, "more_body": False}
        await self.app(scope, _replay([request], receive), send)


_REWRITTEN = frozenset({b"x-signature", b"content-length"})


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` that first gives back ``messages`` already read, then reads on."""
    waiting = list(messages)

    async def replayed() -> Message:
        return waiting.pop(0) if waiting else await receive()

    return replayed


class HttpEventGuardError(RuntimeError):
    """The driver serves HTTP but the guard cannot be installed on it."""


def install_http_event_guard(driver: Driver) -> bool:
    """Add the guard to the driver's app unless ``ONEBOT_SECRET`` is set; True if added. With
    a secret, ``SignedEventRepair`` is added instead."""
    if not isinstance(driver, ASGIMixin):
        return False  # no HTTP server at all (forward WebSocket only)
    app = server_app(driver)
    secret = get_plugin_config(OneBotConfig).onebot_secret
    if app is None:
        if secret:
            return False  # the adapter verifies every POST's signature itself
        raise HttpEventGuardError(
            "TemporalMemory can refuse unsigned OneBot HTTP POST events only on the FastAPI "
            "driver: use DRIVER=~fastapi, or set ONEBOT_SECRET"
        )
    if secret:
        app.add_middleware(SignedEventRepair, secret=secret, routes=lambda: app.router.routes)
        return False  # the adapter verifies every POST's signature itself
    app.add_middleware(HttpEventGuard, routes=lambda: app.router.routes)
    return True


install_http_event_guard(get_driver())
