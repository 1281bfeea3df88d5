"""What every store of the dialogue table shares: its column lists, the row a new turn becomes,
and a stored row read back as a ``MemoryTurn``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
import numpy as np

from ..models import MemoryTurn

TURN_COLUMNS = (
    "id, message_uuid, session_key, self_id, user_id, group_id, chat_type, role, content, "
    "sender_name, qq_message_id, created_at, score, expires_at, token_count"
)

INSERT_COLUMNS = (
    "message_uuid",
    "self_id",
    "session_key",
    "user_id",
    "group_id",
    "chat_type",
    "role",
    "content",
    "sender_name",
    "qq_message_id",
    "raw_segments",
    "embedding",
    "embedding_model",
    "token_count",
    "created_at",
    "keywords",
    "refers_start",
    "refers_end",
    "text_form",
)

SQL_SESSION_SIZE = "SELECT count(*) FROM dialogues WHERE session_key = $1"

SQL_TURNS_BY_ID = f"SELECT {TURN_COLUMNS} FROM dialogues WHERE id = ANY($1::bigint[])"

INDEX_BUILD_TIMEOUT = 6 * 3600.0

COPY_TIMEOUT = 600.0


@dataclass(frozen=True)
class NewTurnRow:
    """A row ready to insert: cleaned content, derived keys, embedding or None."""

    message_uuid: str
    self_id: int | None
    session_key: str
    user_id: int
    group_id: int | None
    chat_type: str
    role: str
    content: str
    sender_name: str | None
    qq_message_id: int | None
    raw_segments: str | None  # JSON text
    embedding: np.ndarray | None
    embedding_model: str | None
    token_count: int
    created_at: datetime
    keywords: list[str]  # search terms (memory_core.lang.keywords), stored as a tsvector
    text_form: int  # which text the embedding and keywords are made of (lang.indexed)
    indexed: str  # that text (not a column: what the caller embeds)
    refers_start: datetime | None = None  # the time the turn talks about (migration 008)
    refers_end: datetime | None = None

    def values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, column) for column in INSERT_COLUMNS)


def turn_from_record(record: asyncpg.Record) -> MemoryTurn:
    """A row read with ``TURN_COLUMNS`` as the turn every caller gets."""
    return MemoryTurn(
        id=record["id"],
        message_uuid=record["message_uuid"],
        session_key=record["session_key"],
        self_id=record["self_id"],
        user_id=record["user_id"],
        group_id=record["group_id"],
        chat_type=record["chat_type"],
        role=record["role"],
        content=record["content"],
        sender_name=record["sender_name"],
        message_id=record["qq_message_id"],
        created_at=record["created_at"],
        score=record["score"],
        expires_at=record["expires_at"],
        token_count=record["token_count"],
    )
