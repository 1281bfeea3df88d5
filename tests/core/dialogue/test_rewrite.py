"""A turn's text becomes its row by one rule (``TurnWriter.rewrite``, ``turn_rows.text_columns``):
a turn edited in the console gets every derived column a turn written with that text gets —
tokens, the time range it talks about (from its own time, not the edit's), its index with the
line it answers, its embedding. Real PostgreSQL, the hashing embedder."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from memory_core.console import MemoryConsole
from tests.turns import derived_columns, said

T0 = datetime(2026, 11, 20, 4, tzinfo=timezone.utc)
ALICE, BOB = 1001, 1002
LINE = "周五有空吗？我们找个时间开会"
EDITED = "明天下午三点开会"


async def chat(memory, user: int, answer: str) -> int:  # type: ignore[no-untyped-def]
    """The bot's line, then ``user``'s answer a minute later; the answer's id."""
    await memory.parts.writer.add_turn(said(user, LINE, T0, role="assistant", message_id=1))
    stored = await memory.parts.writer.add_turn(
        said(user, answer, T0 + timedelta(minutes=1), name="阿丽", message_id=2)
    )
    assert stored.turn is not None
    return stored.turn.id


async def test_an_edited_turn_gets_the_derived_columns_of_a_turn_written_with_that_text(
    memory_factory,
):
    memory = await memory_factory(memory_index_context="both", memory_index_speaker=True)
    edited_id = await chat(memory, ALICE, "好的")
    written_id = await chat(memory, BOB, EDITED)
    console = MemoryConsole.from_parts(memory.parts)

    turn = await console.edit_turn(str(ALICE), edited_id, EDITED, actor="控制台")

    assert turn is not None and turn.content == EDITED
    edited = await derived_columns(memory, edited_id)
    assert edited == await derived_columns(memory, written_id)
    # The time it talks about is the day after the turn was said, and the line it answers is
    # among its search terms: both were made, not left to a backfill.
    assert edited["refers_start"] is not None
    assert (
        edited["refers_start"].astimezone(memory.parts.settings.tz).date()
        == (T0 + timedelta(days=1)).astimezone(memory.parts.settings.tz).date()
    )
    assert "周五" in edited["terms"] and edited["embedding"] is not None


async def test_a_rewrite_expecting_another_text_changes_nothing(memory_factory):
    memory = await memory_factory()
    turn_id = await chat(memory, ALICE, "好的")
    before = await derived_columns(memory, turn_id)

    rewritten = await memory.parts.writer.rewrite(turn_id, EDITED, expected="不是这句")

    assert rewritten is None
    assert await derived_columns(memory, turn_id) == before
