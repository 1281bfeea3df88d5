"""The turn a test stores: one builder for the recall tests' chat lines."""

from __future__ import annotations

from datetime import datetime
from typing import Any

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


# Every column of a turn's row that derives from its text, as compared across the paths that
# write it (a written turn, an edited one, one whose pictures were read).
DERIVED_COLUMNS = (
    "content, token_count, refers_start, refers_end, text_form, embedding_model, "
    "tsvector_to_array(keywords) AS terms, embedding::text AS embedding"
)


async def derived_columns(memory: Any, turn_id: int) -> dict[str, Any]:
    """The columns a turn's text gives its row (terms sorted)."""
    async with memory.parts.database.pool.acquire() as conn:
        record = await conn.fetchrow(
            f"SELECT {DERIVED_COLUMNS} FROM dialogues WHERE id = $1", turn_id
        )
    assert record is not None, turn_id
    row = dict(record)
    row["terms"] = sorted(row["terms"] or [])
    return row
