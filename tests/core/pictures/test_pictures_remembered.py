"""A picture's text is read off the reply path, written into its turn, recalled by what it says,
kept to its chat and forgotten with the turn (real OCR, real PostgreSQL, a loopback server)."""

from __future__ import annotations

import dataclasses

from memory_core.models import ForgetScope, RecalledMessage
from memory_core.pictures import PictureReader
from memory_core.recall.options import RecallOptions
from memory_core.storage.opt_outs import PgOptOutStore
from tests.picture_server import picture_turn

GROUP, OTHER_GROUP = 30003, 30004
ALICE, BOB = 20002, 20003


async def store_and_read(memory, reader: PictureReader, turn, refs):  # type: ignore[no-untyped-def]
    """What the plugin does: start reading, store the turn at once, hand the stored turn over."""
    job = await reader.start(turn, refs)
    stored = await memory.parts.writer.add_turn(turn, embed_later=True)
    assert stored.turn is not None
    assert stored.turn.content == turn.content  # stored at once, before the picture is read
    if job is not None:
        reader.follow(job, stored.turn)
    await reader.settled()
    return stored.turn


async def content_of(memory, turn_id: int) -> str | None:  # type: ignore[no-untyped-def]
    async with memory.parts.database.pool.acquire() as conn:
        return await conn.fetchval("SELECT content FROM dialogues WHERE id = $1", turn_id)


async def picture_rows(memory) -> list:  # type: ignore[no-untyped-def]
    async with memory.parts.database.pool.acquire() as conn:
        return list(await conn.fetch("SELECT * FROM turn_pictures ORDER BY turn_id, position"))


async def test_a_picture_is_read_and_then_recalled_by_what_it_says(
    memory_factory, reader_factory, server, hashing_embedder
):
    memory = await memory_factory()
    reader = reader_factory(memory)
    turn, refs = picture_turn(ALICE, server.url("/note.png"), GROUP)
    stored = await store_and_read(memory, reader, turn, refs)

    content = await content_of(memory, stored.id)
    assert content == "帮我记一下[图片：文字 丰巢快递柜取件码8848 请于今晚十点前取走]"
    # Both channels: the keyword channel alone, and by meaning alone, find it by what it says.
    for mode in ("keyword", "vector"):
        found = await memory.parts.retriever.recall(
            ALICE, "我之前发的那张图上取件码是多少", GROUP, RecallOptions(mode=mode, top_n=1)
        )
        assert any("8848" in t.content for t in found.turns), mode
    async with memory.parts.database.pool.acquire() as conn:
        row = await conn.fetchrow(
            "SELECT embedding, token_count, refers_start FROM dialogues WHERE id = $1", stored.id
        )
    expected = hashing_embedder._vector(content)
    assert abs(float(row["embedding"].to_list()[0]) - float(expected[0])) < 1e-3
    assert row["token_count"] == memory.parts.token_counter.count(content)
    assert row["refers_start"] is not None  # "今晚十点前": the time the picture talks about
    # The hash is kept, not the bytes.
    [picture] = await picture_rows(memory)
    assert picture["status"] == "read" and len(picture["sha256"]) == 32
    assert "8848" in picture["text"]


async def test_the_picture_does_not_reach_another_member_or_group(
    memory_factory, reader_factory, server
):
    memory = await memory_factory()
    reader = reader_factory(memory)
    turn, refs = picture_turn(ALICE, server.url("/note.png"), GROUP)
    await store_and_read(memory, reader, turn, refs)
    for user, group in ((BOB, GROUP), (ALICE, OTHER_GROUP), (ALICE, None)):
        context = await memory.parts.context_builder.build(user, group, "取件码是多少")
        found = await memory.parts.retriever.recall(user, "取件码 8848", group)
        assert "8848" not in context.text, (user, group)
        assert not any("8848" in t.content for t in found.turns), (user, group)
    own = await memory.parts.context_builder.build(ALICE, GROUP, "取件码是多少")
    assert "8848" in own.text


async def test_recalling_the_message_removes_what_its_picture_said(
    memory_factory, reader_factory, server
):
    memory = await memory_factory()
    reader = reader_factory(memory)
    turn, refs = picture_turn(ALICE, server.url("/note.png"), GROUP, mid=77)
    stored = await store_and_read(memory, reader, turn, refs)
    assert await picture_rows(memory)

    await memory.parts.forgetting.delete_message(
        RecalledMessage(self_id=10001, message_id=77, group_id=GROUP, user_id=ALICE)
    )
    assert await content_of(memory, stored.id) is None
    assert await picture_rows(memory) == []
    found = await memory.parts.retriever.recall(ALICE, "取件码 8848", GROUP)
    assert not any("8848" in t.content for t in found.turns)


async def test_a_message_recalled_while_its_picture_is_read_gets_nothing_written(
    memory_factory, reader_factory, server
):
    memory = await memory_factory()
    reader = reader_factory(memory)
    turn, refs = picture_turn(ALICE, server.url("/note.png"), GROUP, mid=78)
    job = await reader.start(turn, refs)
    stored = await memory.parts.writer.add_turn(turn, embed_later=True)
    await memory.parts.forgetting.delete_message(
        RecalledMessage(self_id=10001, message_id=78, group_id=GROUP, user_id=ALICE)
    )
    assert job is not None and stored.turn is not None
    reader.follow(job, stored.turn)
    await reader.settled()
    assert await picture_rows(memory) == []
    async with memory.parts.database.pool.acquire() as conn:
        assert await conn.fetchval("SELECT count(*) FROM dialogues") == 0


async def test_forgetting_a_person_removes_their_pictures_text(
    memory_factory, reader_factory, server
):
    memory = await memory_factory()
    reader = reader_factory(memory)
    turn, refs = picture_turn(ALICE, server.url("/note.png"), GROUP)
    await store_and_read(memory, reader, turn, refs)
    await memory.parts.forgetting.forget(ForgetScope(user_id=ALICE))
    assert await picture_rows(memory) == []


async def test_a_picture_seen_again_is_not_read_again(
    memory_factory, reader_factory, server, counting
):
    memory = await memory_factory()
    reader = reader_factory(memory)
    first, refs = picture_turn(ALICE, server.url("/note.png"), GROUP, mid=1)
    await store_and_read(memory, reader, first, refs)
    # The same bytes at another address (another member, another group): fetched, not read.
    again, refs = picture_turn(BOB, server.url("/same-note.png"), OTHER_GROUP, mid=2)
    stored = await store_and_read(memory, reader, again, refs)
    assert counting.calls == 1
    assert "8848" in (await content_of(memory, stored.id) or "")
    # The client's digest name known before: not even fetched.
    named = [dataclasses.replace(refs[0], file_key="ab" * 16)]
    third, _ = picture_turn(BOB, server.url("/note.png"), OTHER_GROUP, mid=3)
    await store_and_read(memory, reader, third, named)
    fetched = server.hits["/note.png"]
    fourth, _ = picture_turn(ALICE, server.url("/note.png"), GROUP, mid=4)
    stored = await store_and_read(memory, reader, fourth, named)
    assert server.hits["/note.png"] == fetched
    assert counting.calls == 1
    assert "8848" in (await content_of(memory, stored.id) or "")


async def test_an_opted_out_persons_pictures_are_not_fetched(
    memory_factory, reader_factory, server, counting
):
    memory = await memory_factory()
    reader = reader_factory(memory)
    await memory.parts.database.store(PgOptOutStore).opt_out(ALICE, str(GROUP))
    turn, refs = picture_turn(ALICE, server.url("/note.png"), GROUP)
    assert await reader.start(turn, refs) is None
    assert server.hits["/note.png"] == 0 and counting.calls == 0
    # Elsewhere the same person's pictures are read as usual.
    private, refs = picture_turn(ALICE, server.url("/note.png"))
    assert await reader.start(private, refs) is not None


async def test_a_reply_that_waits_gets_its_picture_and_the_turn_is_stored_with_it(
    memory_factory, reader_factory, server
):
    memory = await memory_factory()
    reader = reader_factory(memory)
    turn, refs = picture_turn(ALICE, server.url("/note.png"), GROUP)
    job = await reader.start(turn, refs)
    assert job is not None
    while not await job.wait(60.0):  # a reply's short wait, here long enough to be sure
        pass
    labelled = dataclasses.replace(turn, content=job.labelled(turn.content))
    assert "8848" in labelled.content
    stored = await memory.parts.writer.add_turn(labelled, embed_later=True)
    assert stored.turn is not None
    reader.follow(job, stored.turn)
    await reader.settled()
    assert await content_of(memory, stored.turn.id) == labelled.content  # not labelled twice
    assert len(await picture_rows(memory)) == 1
