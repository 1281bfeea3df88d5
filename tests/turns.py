"""The turn a test stores: one builder for the recall tests' chat lines."""

from __future__ import annotations

from datetime import datetime

from memory_core.models import TurnInput


def said(
    user: int,
    text: str,
    at: datetime,
    group: int | None = None,
    *,
    role: str = "user",
    name: str | None = None,
    message_id: int | None = None,
) -> TurnInput:
    """What ``user`` (or the bot, ``role="assistant"``) said at ``at`` in ``group`` or private."""
    return TurnInput(
        user_id=user,
        group_id=group,
        role=role,  # type: ignore[arg-type]
        content=text,
        sender_name=name,
        message_id=message_id,
        created_at=at,
    )
