"""What the two ASGI guards share: which route a request reaches, and warnings that a flood
cannot turn into a flood of log lines (``http_event_guard``, ``ws_frame_guard``)."""

from __future__ import annotations

import time
from collections.abc import Callable

from starlette.routing import BaseRoute, Match
from starlette.types import Scope

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
