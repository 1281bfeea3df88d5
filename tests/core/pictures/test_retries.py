"""A picture not read for a passing reason (the per-minute budget, a dropped connection) is read
by a later retry round from its turn's stored segments, within the budget and the attempt cap;
a sticker declined by policy, a withdrawn (撤回) turn and an opted-out person's picture are not
tried again (real OCR, real PostgreSQL, a loopback picture server)."""

from __future__ import annotations

import dataclasses
import socket

from memory_core.errors import PictureError
from memory_core.models import RecalledMessage
from memory_core.pictures import picture_refs
from memory_core.recall.options import RecallOptions
from memory_core.storage.opt_outs import PgOptOutStore
from tests.core.pictures.test_pictures_remembered import content_of, picture_rows, store_and_read
from tests.picture_addresses import PUBLIC_HOST
from tests.picture_server import blank_picture, note_picture, picture_turn

GROUP = 30013
ALICE = 20012


class Clock:
    """The budget's clock, moved on by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def closed_port_url() -> str:
    """An address where nothing listens: every fetch fails with a dropped connection."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://{PUBLIC_HOST}:{port}/gone.png"


async def opened(memory_factory, reader_factory, **options):  # type: ignore[no-untyped-def]
    """A memory, the budget's clock and a reader on it (``options``: the reader's)."""
    memory = await memory_factory()
    clock = Clock()
    return memory, clock, reader_factory(memory, clock=clock, **options)


async def spend_the_minute(memory, reader, server, group: int | None = GROUP) -> None:  # type: ignore[no-untyped-def]
    """A first picture takes the minute's one fetch (``per_minute=1``)."""
    server.pictures["/first.png"] = blank_picture()
    first, refs = picture_turn(ALICE, server.url("/first.png"), group, mid=1)
    await store_and_read(memory, reader, first, refs)


async def rows_by_turn(memory) -> dict[int, dict]:  # type: ignore[no-untyped-def]
    return {r["turn_id"]: dict(r) for r in await picture_rows(memory)}


async def test_a_picture_skipped_by_the_budget_is_read_by_a_later_retry_and_then_recalled(
    memory_factory, reader_factory, server
):
    memory, clock, reader = await opened(memory_factory, reader_factory, per_minute=1)
    await spend_the_minute(memory, reader, server)
    turn, refs = picture_turn(ALICE, server.url("/note.png"), GROUP, mid=2)
    stored = await store_and_read(memory, reader, turn, refs)
    assert await content_of(memory, stored.id) == "帮我记一下[图片]"
    assert (await rows_by_turn(memory))[stored.id]["status"] == "skipped"

    assert await reader.retry_skipped() == 0  # the minute's budget is spent: nothing tried
    assert server.hits["/note.png"] == 0
    clock.now += 61.0
    assert await reader.retry_skipped() == 1

    content = await content_of(memory, stored.id)
    assert content == "帮我记一下[图片：文字 丰巢快递柜取件码8848 请于今晚十点前取走]"
    row = (await rows_by_turn(memory))[stored.id]
    assert (row["status"], row["attempts"]) == ("read", 2)
    for mode in ("keyword", "vector"):
        found = await memory.parts.retriever.recall(
            ALICE, "我之前发的那张图上取件码是多少", GROUP, RecallOptions(mode=mode, top_n=1)
        )
        assert any("8848" in t.content for t in found.turns), mode
    clock.now += 61.0
    assert await reader.retry_skipped() == 0  # read: not tried again


async def test_a_turn_with_two_pictures_gets_the_retried_ones_label_beside_the_read_one(
    memory_factory, reader_factory, server
):
    memory, clock, reader = await opened(memory_factory, reader_factory, per_minute=1)
    server.pictures["/first.png"] = note_picture(("会议改到周五",))
    segments = [
        {"type": "text", "data": {"text": "看这两张"}},
        {"type": "image", "data": {"file": "a.png", "url": server.url("/first.png")}},
        {"type": "image", "data": {"file": "b.png", "url": server.url("/note.png")}},
    ]
    turn, _ = picture_turn(ALICE, server.url("/first.png"), GROUP, mid=5)
    turn = dataclasses.replace(turn, content="看这两张[图片][图片]", raw_segments=segments)
    stored = await store_and_read(memory, reader, turn, picture_refs(segments))
    assert await content_of(memory, stored.id) == "看这两张[图片：文字 会议改到周五][图片]"

    clock.now += 61.0
    assert await reader.retry_skipped() == 1
    assert await content_of(memory, stored.id) == (
        "看这两张[图片：文字 会议改到周五][图片：文字 丰巢快递柜取件码8848 请于今晚十点前取走]"
    )


async def test_a_sticker_declined_for_its_size_is_not_tried_again(
    memory_factory, reader_factory, server
):
    memory, clock, reader = await opened(memory_factory, reader_factory)
    segments = [
        {
            "type": "image",
            "data": {
                "file": "s.png",
                "url": server.url("/big-sticker.png"),
                "sub_type": 1,
                "summary": "[动画表情]",
            },
        }
    ]
    turn, _ = picture_turn(ALICE, server.url("/big-sticker.png"), GROUP)
    turn = dataclasses.replace(turn, content="[动画表情]", raw_segments=segments)
    stored = await store_and_read(memory, reader, turn, picture_refs(segments))
    assert (await rows_by_turn(memory))[stored.id]["status"] == "declined"
    assert server.hits["/big-sticker.png"] == 1

    clock.now += 61.0
    assert await reader.retry_skipped() == 0
    assert server.hits["/big-sticker.png"] == 1
    assert await content_of(memory, stored.id) == "[动画表情]"


async def test_attempts_stop_at_the_cap(memory_factory, reader_factory):
    memory, clock, reader = await opened(memory_factory, reader_factory, max_attempts=3)
    turn, refs = picture_turn(ALICE, closed_port_url(), GROUP)
    stored = await store_and_read(memory, reader, turn, refs)
    assert (await rows_by_turn(memory))[stored.id]["attempts"] == 1

    tried = []
    for _ in range(4):
        clock.now += 61.0
        tried.append(await reader.retry_skipped())
    assert tried == [1, 1, 0, 0]
    row = (await rows_by_turn(memory))[stored.id]
    assert (row["status"], row["attempts"]) == ("skipped", 3)
    assert await content_of(memory, stored.id) == "帮我记一下[图片]"


async def test_a_withdrawn_turns_picture_is_not_tried_again(memory_factory, reader_factory, server):
    memory, clock, reader = await opened(memory_factory, reader_factory, per_minute=1)
    await spend_the_minute(memory, reader, server)
    turn, refs = picture_turn(ALICE, server.url("/note.png"), GROUP, mid=78)
    stored = await store_and_read(memory, reader, turn, refs)
    assert (await rows_by_turn(memory))[stored.id]["status"] == "skipped"

    await memory.parts.forgetting.delete_message(
        RecalledMessage(self_id=10001, message_id=78, group_id=GROUP, user_id=ALICE)
    )
    clock.now += 61.0
    assert await reader.retry_skipped() == 0
    assert server.hits["/note.png"] == 0
    assert stored.id not in await rows_by_turn(memory)


async def test_an_opted_out_persons_skipped_picture_is_not_tried_again(
    memory_factory, reader_factory, server
):
    memory, clock, reader = await opened(memory_factory, reader_factory, per_minute=1)
    await spend_the_minute(memory, reader, server, group=None)  # in a private chat
    turn, refs = picture_turn(ALICE, server.url("/note.png"), GROUP, mid=2)
    await store_and_read(memory, reader, turn, refs)

    await memory.parts.database.store(PgOptOutStore).opt_out(ALICE, str(GROUP))
    clock.now += 61.0
    assert await reader.retry_skipped() == 0
    assert server.hits["/note.png"] == 0


async def test_a_retry_round_takes_no_more_than_the_budget_leaves(
    memory_factory, reader_factory, server
):
    memory, clock, reader = await opened(memory_factory, reader_factory, per_minute=2)
    paths = [f"/blank-{i}.gif" for i in range(5)]
    for i, path in enumerate(paths):
        server.pictures[path] = blank_picture((40 + i, 40))  # five distinct pictures
        turn, refs = picture_turn(ALICE, server.url(path), GROUP, mid=10 + i)
        await store_and_read(memory, reader, turn, refs)
    assert sum(server.hits[p] for p in paths) == 2  # the minute's budget; three skipped

    clock.now += 61.0
    server.hits.clear()
    assert await reader.retry_skipped() == 2
    assert sum(server.hits[p] for p in paths) == 2
    statuses = sorted(r["status"] for r in (await rows_by_turn(memory)).values())
    assert statuses == ["read", "read", "read", "read", "skipped"]
    assert await reader.retry_skipped() == 0  # within the same minute: nothing left
    clock.now += 61.0
    assert await reader.retry_skipped() == 1


class FailingOnce:
    """The real OCR, but its first picture fails as a stalled or dead worker does."""

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner = inner
        self.failed = False

    async def read(self, picture: bytes) -> list[str]:
        if not self.failed:
            self.failed = True
            raise PictureError("the OCR worker ended", lasting=False)
        return await self.inner.read(picture)


async def test_a_picture_whose_ocr_worker_died_is_skipped_and_read_by_the_next_round(
    memory_factory, reader_factory, server, counting
):
    memory = await memory_factory()
    reader = reader_factory(memory, text_reader=FailingOnce(counting))
    turn, refs = picture_turn(ALICE, server.url("/note.png"), GROUP, mid=3)
    stored = await store_and_read(memory, reader, turn, refs)
    assert (await rows_by_turn(memory))[stored.id]["status"] == "skipped"
    assert await reader.retry_skipped() == 1
    assert "取件码8848" in await content_of(memory, stored.id)


async def test_the_memorys_maintenance_round_runs_the_retries_without_waiting_for_them(
    memory_factory, reader_factory, server
):
    """The reader has no loop of its own: its retry round is a step of the memory's
    maintenance (``open_chat_bot`` adds it), started beside the round, which goes on."""
    memory, clock, reader = await opened(memory_factory, reader_factory, per_minute=1)
    await spend_the_minute(memory, reader, server)
    turn, refs = picture_turn(ALICE, server.url("/note.png"), GROUP, mid=2)
    stored = await store_and_read(memory, reader, turn, refs)
    [step] = reader.background_steps()
    memory.daily.add(step)
    clock.now += 61.0
    await memory.maintenance_round()
    await reader.settled()
    assert "8848" in await content_of(memory, stored.id)
    assert server.hits["/note.png"] == 1
