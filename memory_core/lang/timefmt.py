"""Time as the model reads it: absolute stamps, Chinese relative phrases, memory lines.

Every function takes timezone-aware datetimes and the display timezone explicitly; naive
datetimes are refused with ``ValueError`` because their meaning depends on the machine.
Elapsed time is measured on the absolute timeline (so a DST jump does not add or remove an
hour), while "yesterday" / "3 days ago" count calendar days on the wall clock of ``tz``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from ..models import MemoryTurn

ABSOLUTE_FORMAT = "%Y-%m-%d %H:%M:%S"
CONTINUATION_INDENT = "  "
"""Prefix of the second and later lines of a multi-line memory line (see format_memory_line)."""

_WEEKDAYS_ZH = ("星期一", "星期二", "星期三", "星期四", "星期五", "星期六", "星期日")
# Across midnight, "3小时前" reads better than "昨天" for a conversation late last night.
_HOURS_ACROSS_MIDNIGHT = timedelta(hours=6)


def _require_aware(dt: datetime, name: str) -> None:
    if dt.tzinfo is None or dt.tzinfo.utcoffset(dt) is None:
        raise ValueError(f"{name} must be timezone-aware, got naive {dt!r}")


def format_absolute(dt: datetime, tz: ZoneInfo) -> str:
    """``2024-01-16 10:30:15``: ``dt`` shown on the wall clock of ``tz``, to the second."""
    _require_aware(dt, "dt")
    return dt.astimezone(tz).strftime(ABSOLUTE_FORMAT)


def weekday_zh(dt: datetime, tz: ZoneInfo) -> str:
    """The weekday of ``dt`` in ``tz`` as ``星期一`` … ``星期日``."""
    _require_aware(dt, "dt")
    return _WEEKDAYS_ZH[dt.astimezone(tz).weekday()]


def relative_time_zh(then: datetime, now: datetime, tz: ZoneInfo) -> str:
    """How long before ``now`` the moment ``then`` was, in short Chinese.

    ``刚刚`` (under a minute, or any time in the future: a stored turn cannot come from the
    future, so that is clock skew), ``N分钟前``, ``N小时前`` (same calendar day, or under six
    hours across midnight), ``昨天``, ``N天前`` (2–6 days), ``N周前`` (7–29 days, days // 7),
    ``N个月前`` (30–364 days, days // 30), ``N年前`` (days // 365). Days are calendar days in
    ``tz``.
    """
    _require_aware(then, "then")
    _require_aware(now, "now")
    # Subtract in UTC: Python subtracts two datetimes sharing a tzinfo as wall-clock times,
    # which would be off by an hour across a DST change.
    elapsed = now.astimezone(timezone.utc) - then.astimezone(timezone.utc)
    if elapsed < timedelta(minutes=1):
        return "刚刚"
    if elapsed < timedelta(hours=1):
        return f"{elapsed // timedelta(minutes=1)}分钟前"

    days = (now.astimezone(tz).date() - then.astimezone(tz).date()).days
    if days == 0 or elapsed < _HOURS_ACROSS_MIDNIGHT:
        return f"{elapsed // timedelta(hours=1)}小时前"
    if days == 1:
        return "昨天"
    if days < 7:
        return f"{days}天前"
    if days < 30:
        return f"{days // 7}周前"
    if days < 365:
        return f"{days // 30}个月前"
    return f"{days // 365}年前"


def _single_line(text: str) -> str:
    return " ".join(text.split())


def format_memory_line(
    turn: MemoryTurn, now: datetime, tz: ZoneInfo, *, label: str | None = None
) -> str:
    """``[2024-01-16 10:30:15] (5小时前) user(小明): content`` — one recalled turn for a prompt.

    Without a sender name the label is just the role (``user: content``); the sender name is
    flattened to one line. Line breaks inside the content are kept (code, lists and poems stay
    readable): ``\\r\\n`` and ``\\r`` become ``\\n``, trailing whitespace is dropped, and every
    continuation line is prefixed with ``CONTINUATION_INDENT``. So only real memory lines start
    at column 0 with ``[`` — a user cannot forge a memory line by typing a newline and a fake
    stamp — and the content comes back by removing that indent from each continuation line.
    ``label`` replaces the role and name (a shared group's other members, see ``prompt``).
    """
    if label is not None:
        label = _single_line(label)
    elif turn.sender_name is not None and turn.sender_name.strip():
        label = f"{turn.role}({_single_line(turn.sender_name)})"
    else:
        label = turn.role
    content = turn.content.replace("\r\n", "\n").replace("\r", "\n").rstrip()
    content = content.replace("\n", "\n" + CONTINUATION_INDENT)
    stamp = format_absolute(turn.created_at, tz)
    relative = relative_time_zh(turn.created_at, now, tz)
    return f"[{stamp}] ({relative}) {label}: {content}"
