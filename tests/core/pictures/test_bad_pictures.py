"""What a picture CDN or a sender can do wrong is harmless: the turn stays stored as it came,
nothing is raised, and the reading says why (too big, gone, not a picture, a loop, a sticker)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from memory_core.errors import PictureError
from tests.picture_addresses import public_fetcher
from tests.picture_server import picture_turn

GROUP = 30003
ALICE = 20002


async def stored_after_reading(memory, reader, turn, refs):  # type: ignore[no-untyped-def]
    job = await reader.start(turn, refs)
    stored = await memory.parts.writer.add_turn(turn, embed_later=True)
    assert job is not None and stored.turn is not None
    reader.follow(job, stored.turn)
    await reader.settled()
    async with memory.parts.database.pool.acquire() as conn:
        content = await conn.fetchval("SELECT content FROM dialogues WHERE id = $1", stored.turn.id)
        rows = await conn.fetch("SELECT status FROM turn_pictures")
    return content, [r["status"] for r in rows], job.done.result()


@pytest.mark.parametrize(
    ("path", "status", "reason"),
    [
        ("/huge", "refused", "more than"),  # Content-Length over the cap: body never read
        ("/endless", "refused", "larger than"),  # no Content-Length: cut at the cap
        ("/missing", "refused", "HTTP 404"),
        ("/page", "refused", "not a picture"),
        ("/loop", "refused", "redirected more than"),
    ],
)
async def test_a_bad_picture_leaves_the_turn_stored_as_it_came(
    memory_factory, reader_factory, server, counting, path, status, reason
):
    memory = await memory_factory()
    reader = reader_factory(memory)
    turn, refs = picture_turn(ALICE, server.url(path), GROUP)
    content, statuses, readings = await stored_after_reading(memory, reader, turn, refs)
    assert content == "帮我记一下[图片]"
    assert statuses == [status]
    assert reason in readings[0].reason
    assert counting.calls == 0


async def test_a_picture_declared_too_big_is_not_fetched(memory_factory, reader_factory, server):
    memory = await memory_factory()
    reader = reader_factory(memory)
    turn, refs = picture_turn(ALICE, server.url("/note.png"), GROUP)
    refs = [dataclasses.replace(refs[0], declared_size=10**8)]
    content, statuses, _ = await stored_after_reading(memory, reader, turn, refs)
    assert content == "帮我记一下[图片]" and statuses == ["refused"]
    assert server.hits["/note.png"] == 0


async def test_a_large_sticker_is_not_read_and_a_small_one_once(
    memory_factory, reader_factory, server, counting
):
    memory = await memory_factory()
    reader = reader_factory(memory)
    big, refs = picture_turn(ALICE, server.url("/big-sticker.png"), GROUP, text="哈", mid=1)
    big = dataclasses.replace(big, content="哈[动画表情]")
    refs = [dataclasses.replace(refs[0], sticker=True, placeholder="[动画表情]")]
    content, statuses, _ = await stored_after_reading(memory, reader, big, refs)
    assert content == "哈[动画表情]" and statuses == ["declined"]  # by policy: not tried again
    assert counting.calls == 0

    for mid in (2, 3, 4):
        small, refs = picture_turn(ALICE, server.url("/sticker.gif"), GROUP, text="哈", mid=mid)
        small = dataclasses.replace(small, content="哈[动画表情]")
        refs = [dataclasses.replace(refs[0], sticker=True, placeholder="[动画表情]")]
        content, _, _ = await stored_after_reading(memory, reader, small, refs)
        assert content == "哈[动画表情]"  # a plain sticker says nothing
    assert counting.calls == 1  # read once per distinct picture


async def test_over_the_budget_a_picture_is_not_fetched(memory_factory, reader_factory, server):
    memory = await memory_factory()
    reader = reader_factory(memory, per_minute=1)
    first, refs = picture_turn(ALICE, server.url("/sticker.gif"), GROUP, mid=1)
    await stored_after_reading(memory, reader, first, refs)
    second, refs = picture_turn(ALICE, server.url("/note.png"), GROUP, mid=2)
    content, statuses, readings = await stored_after_reading(memory, reader, second, refs)
    assert content == "帮我记一下[图片]"
    assert statuses[-1] == "skipped" and "budget" in readings[0].reason
    assert server.hits["/note.png"] == 0


async def test_a_full_queue_leaves_the_pictures_unread(memory_factory, reader_factory, server):
    memory = await memory_factory()
    reader = reader_factory(memory, queue_size=1)
    # The one worker is held by a picture that never comes; the next fills the queue.
    turns = [picture_turn(ALICE, server.url("/stall"), GROUP, mid=m) for m in (1, 2, 3)]
    first = await reader.start(*turns[0])
    assert await asyncio.to_thread(server.stalled.wait, 60)  # the worker took it off the queue
    second = await reader.start(*turns[1])
    third = await reader.start(*turns[2])
    assert first is not None and second is not None and third is not None
    assert not first.done.done() and not second.done.done()
    [reading] = third.done.result()
    assert reading.status == "skipped" and reading.reason == "queue full"
    stored = await memory.parts.writer.add_turn(turns[2][0], embed_later=True)
    assert stored.turn is not None and stored.turn.content == "帮我记一下[图片]"


async def test_a_few_redirects_are_followed(server):
    fetcher = public_fetcher()
    try:
        assert (await fetcher.fetch(server.url("/hop/3"))).startswith(b"\x89PNG")
        with pytest.raises(PictureError, match="redirected more than 3"):
            await fetcher.fetch(server.url("/hop/4"))
    finally:
        await fetcher.aclose()


async def test_base64_pictures_from_get_image_are_capped_and_checked():
    import base64

    from tests.picture_server import blank_picture

    fetcher = public_fetcher(max_bytes=2_000, timeout=5.0, max_redirects=0)
    try:
        small = blank_picture()
        assert await fetcher.fetch("base64://" + base64.b64encode(small).decode()) == small
        with pytest.raises(PictureError, match="larger than"):
            await fetcher.fetch("base64://" + base64.b64encode(b"\0" * 5_000).decode())
        with pytest.raises(PictureError, match="not a picture"):
            await fetcher.fetch("base64://" + base64.b64encode(b"hello").decode())
        with pytest.raises(PictureError, match="not http"):
            await fetcher.fetch("file:///etc/passwd")
    finally:
        await fetcher.aclose()


async def test_a_picture_without_address_is_located_or_left_alone(
    memory_factory, reader_factory, server
):
    memory = await memory_factory()
    reader = reader_factory(memory)

    async def located() -> str | None:
        return server.url("/note.png")

    async def unknown() -> str | None:
        return None

    turn, refs = picture_turn(ALICE, "", GROUP, mid=1)
    refs = [dataclasses.replace(refs[0], url=None, locate=located)]
    content, _, _ = await stored_after_reading(memory, reader, turn, refs)
    assert "8848" in content
    turn, refs = picture_turn(ALICE, "", GROUP, mid=2)
    refs = [dataclasses.replace(refs[0], url=None, locate=unknown)]
    content, _, readings = await stored_after_reading(memory, reader, turn, refs)
    assert content == "帮我记一下[图片]" and readings[0].status == "refused"


async def test_without_the_database_no_picture_is_fetched(memory_factory, reader_factory, server):
    memory = await memory_factory()
    reader = reader_factory(memory)
    pool = memory.parts.database.detach()
    assert pool is not None
    try:
        turn, refs = picture_turn(ALICE, server.url("/note.png"), GROUP)
        assert await reader.start(turn, refs) is None
        assert server.hits["/note.png"] == 0
    finally:
        memory.parts.database.attach(pool)
