"""Bounds every HTTP request body the bot's server reads, before it is read.

Starlette reads a body whole into memory (``request.body()``), and the console's login form is
reachable without logging in: four concurrent 200 MB POSTs once took the bot from 200 MB to over
a gigabyte resident. This pure ASGI middleware sits on the whole FastAPI app (the OneBot routes,
the console, anything mounted later) and answers 413 to a request whose ``Content-Length`` is
over ``MAX_REQUEST_BYTES`` without reading a byte of it; a body sent without a length (chunked)
is counted as it streams in and cut off with 413 as soon as it passes the limit, so no request
can make the bot hold more than the limit. WebSocket frames are bounded by the server itself
(uvicorn's ``ws_max_size``, set by ``server_limits``) and the frame guard.
"""

from __future__ import annotations

from nonebot import get_driver
from nonebot.drivers import Driver
from nonebot.log import logger
from starlette.exceptions import HTTPException
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .asgi_guard import WarningThrottle, server_app

MAX_REQUEST_BYTES = 2 * 1024 * 1024
"""The largest request body read: far above any console form or OneBot event posted over HTTP
(those carry links, not pictures), far below what would hurt a small server ten times over."""

TOO_LARGE = "请求体太大（上限 {limit} 字节）。\n"


def declared_length(scope: Scope) -> int | None:
    """The request's ``Content-Length``, or ``None`` when absent or not a number."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` once a streamed body passes the limit; Starlette's exception
    middleware (the app's or a mounted app's) turns it into the 413 response."""

    def __init__(self, limit: int) -> None:
        super().__init__(status_code=413, detail=TOO_LARGE.format(limit=limit).strip())


class RequestBodyLimit:
    """413 for any HTTP request whose body is, or grows, larger than ``limit`` bytes."""

    def __init__(self, app: ASGIApp, *, limit: int = MAX_REQUEST_BYTES) -> None:
        self.app = app
        self.limit = limit
        self._warnings = WarningThrottle()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = declared_length(scope)
        if declared is not None and declared > self.limit:
            self._warn(scope, declared)
            refusal = PlainTextResponse(TOO_LARGE.format(limit=self.limit), status_code=413)
            await refusal(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    self._warn(scope, received)
                    raise BodyTooLarge(self.limit)
            return message

        await self.app(scope, limited_receive, send)

    def _warn(self, scope: Scope, size: int) -> None:
        more = self._warnings.due()
        if more is None:
            return
        client = scope.get("client")
        source = f"{client[0]}" if client else "an unknown client"
        also = f" ({more} more since the last warning)" if more else ""
        logger.warning(
            f"TemporalMemory: refused a {size}-byte request to {scope.get('path', '?')} from "
            f"{source}: bodies over {self.limit} bytes are not read{also}"
        )


def install_body_limit(driver: Driver) -> bool:
    """Add the limit to the driver's app (while the plugin loads: Starlette refuses middleware
    once the app has started); True if added."""
    app = server_app(driver)
    if app is None:
        return False
    app.add_middleware(RequestBodyLimit)
    return True


install_body_limit(get_driver())
