"""A turn whose picture was read gets the row a turn written with that text gets (the one rule
of ``TurnWriter.rewrite``): tokens, the time the picture talks about, its index with the line it
answers, its embedding (real OCR, real PostgreSQL, a loopback server)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

from memory_core.lang.keywords import document_terms
from memory_core.pictures import PictureReader
from tests.picture_server import picture_turn
from tests.turns import derived_columns, said

ALICE, BOB = 20002, 20003
LINE = "需要我帮你备忘什么吗？"


async def test_a_turn_read_from_its_picture_gets_the_derived_columns_of_a_written_one(
    memory_factory, reader_factory, server
):
    memory = await memory_factory(memory_index_context="both")
    reader: PictureReader = reader_factory(memory)
    said_at = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=5)
    await memory.parts.writer.add_turn(said(ALICE, LINE, said_at, role="assistant", message_id=1))
    turn, refs = picture_turn(ALICE, server.url("/note.png"), mid=2)
    turn = dataclasses.replace(turn, created_at=said_at + timedelta(minutes=1))
    job = await reader.start(turn, refs)
    stored = await memory.parts.writer.add_turn(turn, embed_later=True)
    assert job is not None and stored.turn is not None
    reader.follow(job, stored.turn)
    await reader.settled()

    read = await derived_columns(memory, stored.turn.id)
    assert "8848" in read["content"]  # the picture's text is in the turn
    await memory.parts.writer.add_turn(said(BOB, LINE, said_at, role="assistant", message_id=1))
    written = await memory.parts.writer.add_turn(
        said(BOB, read["content"], said_at + timedelta(minutes=1), message_id=2)
    )
    assert written.turn is not None
    assert read == await derived_columns(memory, written.turn.id)
    assert read["refers_start"] is not None  # "今晚十点前"
    # The line it answers is among its search terms.
    line_only = set(document_terms(LINE)) - set(document_terms(read["content"]))
    assert line_only and line_only <= set(read["terms"])
