"""Stored turns whose times lie outside the range the memory accepts (``time_bounds``).

Migration 013 repaired such rows and its CHECK constraints keep new ones out, but a database
restored without them, or another writer that dropped them, can hold one again. Read back,
``-infinity`` is a ``datetime.min`` without a zone and year 9999 overflows the first date
arithmetic: one such row used to stop a person's replies and a background loop for good. So
every read of turns for a reply, the console or an upkeep round leaves them out (each logged
once per process), and /memstat counts them (``admin_store.SQL_STATS_SUMMARY``) so the
operator can repair them (rerunning migration 013's UPDATE statements does).
"""

from __future__ import annotations

import logging
from datetime import datetime

import asyncpg

from ..time_bounds import EARLIEST, LATEST

log = logging.getLogger(__name__)

_NOTED_MAX = 10_000  # row ids remembered so each is logged once, bounded
_noted: set[int] = set()


def usable_time(value: object) -> bool:
    """Whether ``value`` is a time the memory can compute with: aware and inside the range."""
    return isinstance(value, datetime) and value.tzinfo is not None and EARLIEST <= value < LATEST


def usable_turn(record: asyncpg.Record) -> bool:
    """Whether a row read from ``dialogues`` has usable times (``created_at``, and
    ``expires_at`` where the query reads it); a row that has not is logged once and is to be
    left out by the caller."""
    created = record["created_at"]
    expires = record.get("expires_at")
    if usable_time(created) and (expires is None or usable_time(expires)):
        return True
    row_id = int(record["id"])
    if row_id not in _noted:
        if len(_noted) >= _NOTED_MAX:
            _noted.clear()
        _noted.add(row_id)
        log.warning(
            "turn %d has a time outside %s..%s (created_at %r, expires_at %r): left out of "
            "every read until repaired (/memstat counts such rows)",
            row_id,
            EARLIEST.date(),
            LATEST.date(),
            created,
            expires,
        )
    return False
