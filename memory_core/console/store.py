"""What the console reads of its own: sessions and found turns. The audit log it writes is the
core's (``storage.audit_log``); the turns and distilled memories it shows and changes belong to
their stores (``dialogue.admin_store``, ``PgDistilledStore``), the
recycle bin to the core (``storage.recycle_bin``: /forget and the purge empty it too);
``MemoryConsole`` runs a change, its bin row and its audit entry in one transaction.

Every query about a session names it, so no change through one session can touch another's
rows. Rows leave as the small frozen dataclasses below.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from ..errors import StorageError
from ..models import MemoryTurn


@dataclass(frozen=True)
class SessionRow:
    """One session in the list: who, where, how much, how recent."""

    session_key: str
    user_id: int
    group_id: int | None
    chat_type: str
    turns: int
    last_at: datetime
    name: str | None
    memories: int
    group_name: str | None = None


@dataclass(frozen=True)
class FoundTurn:
    """A turn in the browser; ``similarity`` when found by meaning."""

    turn: MemoryTurn
    similarity: float | None
    pinned: bool = False


class ConsoleConflictError(StorageError):
    """A change would make two rows one: a restore of a row stored again meanwhile, or an
    edit giving a memory the text of another current memory of its session."""


@contextmanager
def conflicts_refused(message: str) -> Iterator[None]:
    """Turn a unique violation inside the block into ``ConsoleConflictError(message)``."""
    try:
        yield
    except StorageError as exc:
        if isinstance(exc.__cause__, asyncpg.UniqueViolationError):
            raise ConsoleConflictError(message) from exc
        raise
