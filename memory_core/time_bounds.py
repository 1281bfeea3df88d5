"""The range of times the memory accepts, and the one check every way in uses.

A time far outside any chat's life does harm out of proportion: asyncpg writes
``datetime.min`` as ``-infinity`` and reads it back without a zone, and a year-9999 time
overflows the first ``timedelta`` added to it, so one imported line could stop a person's
replies and a background loop for good. So a time must lie in ``[EARLIEST, LATEST)``, and a
time something was *said* (a turn, a fact first seen) no later than a day past now (clocks of
QQ clients and servers drift; a day is generous). The database holds the same outer bounds as
CHECK constraints (migration 013), so no other writer can store what this module refuses.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

EARLIEST = datetime(1990, 1, 1, tzinfo=timezone.utc)
"""Earlier than QQ itself (1999): a time before it is a broken clock or a broken export."""

LATEST = datetime(2200, 1, 1, tzinfo=timezone.utc)
"""Later than any expiry or "valid until" a person could mean, far from ``datetime.max``."""

SAID_SLACK = timedelta(days=1)
"""How far past now a time something was said may lie."""

RANGE_TEXT = "1990-01-01 到 2200-01-01（说话时间最晚到现在之后一天）"
"""The accepted range as people read it, for error messages."""


def time_problem(moment: datetime, *, now: datetime | None = None) -> str | None:
    """Why ``moment`` cannot be stored, or ``None`` if it can. With ``now`` it is a time
    something was said, which may not lie more than ``SAID_SLACK`` past ``now``."""
    if moment.tzinfo is None:
        return "needs a timezone offset, e.g. 2024-01-16T10:30:15+08:00"
    if moment < EARLIEST:
        return f"{moment.isoformat()} is before {EARLIEST.date().isoformat()}"
    if moment >= LATEST:
        return f"{moment.isoformat()} is not before {LATEST.date().isoformat()}"
    if now is not None and moment > now + SAID_SLACK:
        return f"{moment.isoformat()} is more than a day in the future"
    return None


def check_time(moment: datetime, what: str, *, now: datetime | None = None) -> datetime:
    """``moment`` if :func:`time_problem` finds nothing, else ``ValueError`` naming ``what``."""
    problem = time_problem(moment, now=now)
    if problem is not None:
        raise ValueError(f"{what} {problem}")
    return moment
