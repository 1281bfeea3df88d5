"""What the two ASGI guards share (``http_event_guard``, ``ws_frame_guard``): which adapter
route a request reaches, warnings that a flood cannot turn into a flood of log lines, and the
repair of message segments whose ``data`` is ``null``."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, ClassVar

from nonebot.drivers import ASGIMixin, Driver
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Receive, Scope, Send

WARNING_INTERVAL = 60.0
"""Seconds between two warnings of one guard."""


def route_path(routes: list[BaseRoute], scope: Scope) -> str | None:
    """The path of the route Starlette itself would pick (the first full match), so that a
    ``root_path`` prefix or a redirect cannot lead a request past a guard."""
    for route in routes:
        match, _ = route.matches(scope)
        if match is Match.FULL:
            path = getattr(route, "path", None)
            return path if isinstance(path, str) else None
    return None


class WarningThrottle:
    """Counts events; says when the next warning is due (once per ``WARNING_INTERVAL``)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._since_warning = 0
        self._next_at = float("-inf")

    def due(self) -> int | None:
        """Count one event; the number of others since the last warning if one is due now,
        else ``None``."""
        self._since_warning += 1
        now = self._clock()
        if now < self._next_at:
            return None
        others = self._since_warning - 1
        self._since_warning = 0
        self._next_at = now + WARNING_INTERVAL
        return others

    def idle(self) -> bool:
        """Whether its minute is over with nothing counted since its last warning."""
        return self._since_warning == 0 and self._clock() >= self._next_at


class AddressThrottle:
    """A ``WarningThrottle`` per remote address: one address's reconnect loop cannot hide
    another's problem, and neither fills the log.

    At most ``MAX_ADDRESSES`` are remembered; past that, those whose minute is over are
    forgotten, and while that does not make room (a flood from many addresses) the others share
    one throttle."""

    MAX_ADDRESSES = 1024

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._by_address: dict[str, WarningThrottle] = {}
        self._overflow = WarningThrottle(clock)

    def due(self, address: str) -> int | None:
        """``WarningThrottle.due`` for ``address``'s own throttle."""
        throttle = self._by_address.get(address)
        if throttle is None:
            if len(self._by_address) >= self.MAX_ADDRESSES:
                self._by_address = {
                    known: kept for known, kept in self._by_address.items() if not kept.idle()
                }
            if len(self._by_address) >= self.MAX_ADDRESSES:
                return self._overflow.due()
            throttle = self._by_address[address] = WarningThrottle(self._clock)
        return throttle.due()


class AdapterRouteGuard:
    """Pure ASGI middleware on the OneBot v11 adapter's routes of one kind: a request of
    ``scope_type`` that reaches one of ``paths`` (and that ``concerns`` says is this guard's)
    goes to ``guard``; everything else passes untouched."""

    scope_type: ClassVar[str]
    paths: ClassVar[frozenset[str]]

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
        if (
            scope["type"] == self.scope_type
            and self.concerns(scope)
            and route_path(self._routes(), scope) in self.paths
        ):
            await self.guard(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    def concerns(self, scope: Scope) -> bool:
        return True

    async def guard(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


def server_app(driver: Driver) -> Starlette | None:
    """The Starlette (FastAPI) app the driver serves, where the guards are added; ``None``
    when the driver serves no such app."""
    if isinstance(driver, ASGIMixin) and isinstance(driver.server_app, Starlette):
        return driver.server_app
    return None


def without_null_data(payload: str | bytes) -> str | bytes | None:
    """The JSON ``payload`` with every message segment's ``"data": null`` made ``{}``, or
    ``None`` when it has none (or is not JSON).

    Some OneBot implementations send a segment without data as ``{"type": "face", "data":
    null}``; the adapter takes the event, but NoneBot's event logging raises on it, so the
    message would be neither answered nor stored. Walked without recursion: a frame nested deep
    enough to reach here must not end in a ``RecursionError``."""
    if (b"null" not in payload) if isinstance(payload, bytes) else ("null" not in payload):
        return None  # the common case, without parsing
    try:
        parsed = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    changed = False
    stack: list[Any] = [parsed]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            if "data" in node and node["data"] is None and isinstance(node.get("type"), str):
                node["data"] = {}
                changed = True
            stack.extend(node.values())
    if not changed:
        return None
    try:
        text = json.dumps(parsed, ensure_ascii=False)
    except RecursionError:
        return None
    return text if isinstance(payload, str) else text.encode("utf-8")
