"""Reading yields to replies (``reader.DEFER_MAX``): a queued picture waits while a reply is
under way, for at most the longest deferral; a reply waiting for its own picture has it read at
once, before the pictures put off (real OCR, real PostgreSQL, a loopback picture server)."""

from __future__ import annotations

from memory_core.conversation.engine import ConversationEngine
from memory_core.models import TurnInput
from memory_core.traffic import ReplyTraffic
from tests.core.conversation.test_chat import Outbox, user_turn
from tests.core.pictures.test_pictures_remembered import content_of
from tests.fakes import RecordingModel
from tests.picture_server import note_picture, picture_turn

GROUP = 30021
ALICE = 20021
BOB = 20022


async def stored_and_followed(memory, reader, turn, refs, *, urgent=False):  # type: ignore[no-untyped-def]
    """The plugin's steps: start reading, store the turn, hand the stored turn over."""
    job = await reader.start(turn, refs, urgent=urgent)
    assert job is not None
    stored = await memory.parts.writer.add_turn(turn, embed_later=True)
    assert stored.turn is not None
    reader.follow(job, stored.turn)
    return job, stored.turn


async def test_a_picture_waits_for_the_replies_and_a_reply_s_own_picture_does_not(
    memory_factory, reader_factory, server
):
    memory = await memory_factory()
    traffic = ReplyTraffic(gap=0.1)
    reader = reader_factory(memory, defer_max=600.0, traffic=traffic)
    server.pictures["/put-off.png"] = note_picture(("晚上八点开会",))
    server.pictures["/own.png"] = note_picture(("取件码 5521",))
    put_off, put_off_refs = picture_turn(BOB, server.url("/put-off.png"), GROUP, mid=1)
    own, own_refs = picture_turn(ALICE, server.url("/own.png"), GROUP, mid=2)

    with traffic.replying():  # a reply under way
        later, later_turn = await stored_and_followed(memory, reader, put_off, put_off_refs)
        # The reply waits for its own picture, queued after the other one: read first.
        now, now_turn = await stored_and_followed(memory, reader, own, own_refs, urgent=True)
        assert await now.wait(120.0)
        assert server.hits["/own.png"] == 1
        assert server.hits["/put-off.png"] == 0  # not even fetched while the reply is under way
        assert not later.done.done()
    # The replies are over: the picture put off is read now.
    assert await later.wait(120.0)
    await reader.settled()
    assert await content_of(memory, now_turn.id) == "帮我记一下[图片：文字 取件码5521]"
    assert await content_of(memory, later_turn.id) == "帮我记一下[图片：文字 晚上八点开会]"


async def test_a_picture_put_off_is_read_anyway_after_the_longest_deferral(
    memory_factory, reader_factory, server
):
    memory = await memory_factory()
    traffic = ReplyTraffic()
    reader = reader_factory(memory, defer_max=0.5, traffic=traffic)
    turn, refs = picture_turn(ALICE, server.url("/note.png"), GROUP)
    with traffic.replying():  # replies all the time: the bound ends the wait
        job, stored = await stored_and_followed(memory, reader, turn, refs)
        assert await job.wait(120.0)
        await reader.settled()
        assert "取件码8848" in (await content_of(memory, stored.id) or "")


async def test_a_reply_counts_as_under_way_from_its_message_to_its_answer(memory_factory):
    memory = await memory_factory()
    engine = ConversationEngine(parts=memory.parts, chat_model=RecordingModel(), bot_name="小诗")
    seen: list[int] = []

    async def ready(turn: TurnInput) -> TurnInput:
        seen.append(engine.traffic.active)
        return turn

    assert engine.traffic.active == 0
    await engine.converse(user_turn("你好", message_id=1), Outbox(), ready=ready)
    assert seen == [1]
    assert engine.traffic.active == 0
