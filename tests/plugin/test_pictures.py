"""Pictures through the bot (nonebug): a reply sees what its picture says, a recorded group
picture gets its text afterwards, ``get_image`` is asked only when a segment has no URL, and
the image segments of NapCat, go-cqhttp and Lagrange become the same references."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from nonebot.adapters.onebot.v11 import Bot, Message, MessageSegment
from nonebug import App

from memory_core.pictures import PictureReader
from memory_core.pictures.fetch import PictureFetcher
from memory_core.pictures.ocr import RapidOcrReader
from tests.picture_server import PictureServer, note_picture
from tests.plugin.events import SELF_ID, message_payload, text_seg
from tests.plugin.test_matchers import EPOCH, adapt

GROUP = 30003
USER = 20002
DIGEST = "6B4DE3DFD1BD271E3297859D41C530F5"


@pytest.fixture
def server() -> Iterator[PictureServer]:
    served = PictureServer({"/note.png": note_picture()})
    yield served
    served.close()


def plugin_reader(runtime: Any, ocr: RapidOcrReader, **overrides: Any) -> PictureReader:
    """A reader on the run's OCR (``ocr``), put into the plugin's runtime."""
    options: dict[str, Any] = dict(per_minute=100) | overrides
    reader = PictureReader(
        database=runtime.memory.parts.database,
        writer=runtime.memory.parts.writer,
        fetcher=PictureFetcher(
            max_bytes=1_000_000, timeout=30.0, max_redirects=3, allowed_hosts=["127.0.0.1"]
        ),
        text_reader=ocr,
        workers=1,
        queue_size=8,
        sticker_max_bytes=10_000,
        text_max_chars=300,
        **options,
    )
    runtime.pictures = reader
    return reader


@pytest.fixture
async def pictures(runtime: Any, ocr: RapidOcrReader) -> AsyncIterator[PictureReader]:
    reader = plugin_reader(runtime, ocr)
    # Long enough that the reply always gets its picture here: no test races a timer.
    runtime.settings = runtime.settings.model_copy(update={"memory_image_reply_wait": 120.0})
    yield reader
    await reader.aclose()


def image_seg(url: str = "", *, file: str = f"{DIGEST}.jpg", **data: Any) -> dict[str, Any]:
    return {
        "type": "image",
        "data": {"summary": "", "file": file, "sub_type": 0, "url": url, **data},
    }


async def contents(runtime: Any, group: int | None = None) -> list[str]:
    turns = await runtime.memory.parts.retriever.recent_turns(USER, group, limit=50, since=EPOCH)
    return [t.content for t in turns]


async def test_a_reply_to_a_picture_sees_what_it_says_and_the_turn_keeps_it(
    app: App, runtime, model, pictures, server
):
    payload = message_payload([text_seg("帮我记一下"), image_seg(server.url("/note.png"))])
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = await adapt(bot, payload)
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, Message(MessageSegment.text("好的")), {"message_id": 700})
    assert "取件码8848" in model.prompts[-1][-1]["content"]
    await pictures.settled()
    said = (await contents(runtime))[0]
    assert said == "帮我记一下[图片：文字 丰巢快递柜取件码8848 请于今晚十点前取走]"

    # Asked later, the memory brings it back by what the picture said.
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = await adapt(bot, message_payload([text_seg("我之前发的那张图上取件码是多少？")]))
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, Message(MessageSegment.text("好的")), {"message_id": 701})
    assert "8848" in model.text()


async def test_a_reply_s_own_picture_is_read_at_once_while_reading_yields_to_replies(
    app: App, runtime, model, server, ocr
):
    # The reply itself is under way while it waits for its picture: put off behind the
    # replies, the picture would not be read within the wait.
    reader = plugin_reader(runtime, ocr, defer_max=200.0, traffic=runtime.engine.traffic)
    runtime.settings = runtime.settings.model_copy(update={"memory_image_reply_wait": 120.0})
    try:
        payload = message_payload([text_seg("帮我记一下"), image_seg(server.url("/note.png"))])
        async with app.test_matcher() as ctx:
            bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
            event = await adapt(bot, payload)
            ctx.receive_event(bot, event)
            ctx.should_call_send(event, Message(MessageSegment.text("好的")), {"message_id": 700})
        assert "取件码8848" in model.prompts[-1][-1]["content"]
    finally:
        await reader.aclose()


async def test_a_recorded_group_picture_gets_its_text_after_it_is_stored(
    app: App, runtime, model, pictures, server
):
    runtime.config = runtime.config.model_copy(update={"bot_record_unaddressed": True})
    payload = message_payload([image_seg(server.url("/note.png"))], group_id=GROUP)
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        ctx.receive_event(bot, await adapt(bot, payload))
    await pictures.settled()
    assert await contents(runtime, GROUP) == [
        "[图片：文字 丰巢快递柜取件码8848 请于今晚十点前取走]"
    ]
    assert model.prompts == []


class ImageClient:
    """The one action of a QQ client the picture path uses: ``get_image``."""

    def __init__(self, answer: dict[str, Any] | Exception) -> None:
        self.answer = answer
        self.asked: list[str] = []

    async def get_image(self, *, file: str) -> dict[str, Any]:
        self.asked.append(file)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


async def test_a_picture_without_url_is_located_with_get_image(plugin: Any, server):
    from nonebot.adapters.onebot.v11 import ActionFailed

    from nonebot_plugin_temporal_memory.pictures import picture_refs

    client = ImageClient({"file": "/QQ/cache/x.jpg", "url": server.url("/note.png")})
    [ref] = picture_refs([image_seg(file=f"{DIGEST}.jpg")], client)  # type: ignore[arg-type]
    assert ref.url is None and ref.locate is not None
    assert await ref.locate() == server.url("/note.png")
    assert client.asked == [f"{DIGEST}.jpg"]
    encoded = ImageClient({"file": "/QQ/cache/x.jpg", "base64": "iVBORw0KGgo="})
    [ref] = picture_refs([image_seg(file="a.jpg")], encoded)  # type: ignore[arg-type]
    assert ref.locate is not None and await ref.locate() == "base64://iVBORw0KGgo="
    failing = ImageClient(ActionFailed(retcode=1404))
    [ref] = picture_refs([image_seg(file="a.jpg")], failing)  # type: ignore[arg-type]
    assert ref.locate is not None and await ref.locate() is None


def test_image_segments_of_every_client_become_references(plugin: Any):
    from nonebot_plugin_temporal_memory.pictures import picture_refs

    napcat = image_seg("https://multimedia.nt.qq.com.cn/download?x", file_size="12345")
    gocq = {"type": "image", "data": {"file": "abc.image", "url": "https://gchat.qpic.cn/x"}}
    lagrange = {"type": "image", "data": {"file": "https://c2cpicdw.qpic.cn/x", "url": ""}}
    sticker = image_seg("https://x/s", sub_type=1, summary="[动画表情]")
    refs = picture_refs([napcat, text_seg("看"), gocq, lagrange, sticker])
    assert [r.position for r in refs] == [0, 1, 2, 3]
    assert refs[0].url.startswith("https://multimedia") and refs[0].file_key == DIGEST.lower()
    assert refs[0].declared_size == 12345 and not refs[0].sticker
    assert refs[1].file_key is None  # "abc.image" names no content
    assert refs[2].url == "https://c2cpicdw.qpic.cn/x"
    assert refs[3].sticker and refs[3].placeholder == "[动画表情]"
    assert [r.placeholder for r in refs[:3]] == ["[图片]"] * 3
    assert all(r.locate is None for r in refs)  # no bot asked: each has an address


def test_faces_by_name_and_market_faces_by_summary(plugin: Any):
    from nonebot_plugin_temporal_memory.segments import flatten_segments

    segments = [
        {"type": "face", "data": {"id": "264"}},
        {"type": "mface", "data": {"summary": "[开心]", "emoji_id": "1"}},
        {"type": "marketface", "data": {"summary": "[比心]"}},
    ]
    assert flatten_segments(segments) == "[表情:捂脸][表情:开心][表情:比心]"


def test_the_console_marks_what_was_read_off_a_picture(plugin: Any):
    from nonebot_plugin_temporal_memory.console.derived import marked_text

    shown = marked_text("看<b>这个</b>[图片：文字 取件码8848 <script>] 和 [图片]")
    assert shown == (
        "看&lt;b&gt;这个&lt;/b&gt;"
        '<mark class="derived" title="机器从图片中读出的文字">[图片：文字 取件码8848 '
        "&lt;script&gt;]</mark> 和 [图片]"
    )
    assert marked_text("[提示：明天开会]") == "[提示：明天开会]"  # typed, not read
    described = marked_text("[图片：一只橘猫趴在键盘上]")  # a vision model's sentence alone
    assert described.startswith('<mark class="derived"')


async def test_a_skipped_picture_without_url_is_located_again_by_its_own_account(
    app: App, runtime, server, ocr
):
    """A retry round reads a stored turn's picture from its segments, asking ``get_image`` of
    the bot account that received it (and of no other)."""
    from nonebot_plugin_temporal_memory.locate import stored_locator

    now = [1000.0]
    reader = plugin_reader(runtime, ocr, per_minute=1, clock=lambda: now[0])
    runtime.config = runtime.config.model_copy(update={"bot_record_unaddressed": True})
    server.pictures["/first.png"] = note_picture(("第一张",))
    first = image_seg(server.url("/first.png"), file="first.png")
    payloads = [
        message_payload([first], group_id=GROUP, message_id=801),
        message_payload([image_seg(file=f"{DIGEST}.jpg")], group_id=GROUP, message_id=802),
    ]
    try:
        async with app.test_matcher() as ctx:
            bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
            for payload in payloads:
                ctx.receive_event(bot, await adapt(bot, payload))
        await reader.settled()
        assert (await contents(runtime, GROUP))[-1] == "[图片]"  # over the minute's budget

        now[0] += 61.0
        async with app.test_api() as ctx:
            ctx.create_bot(base=Bot, self_id=str(SELF_ID + 1))  # another account: not asked
            ctx.create_bot(base=Bot, self_id=str(SELF_ID))
            ctx.should_call_api(
                "get_image", {"file": f"{DIGEST}.jpg"}, {"url": server.url("/note.png")}
            )
            reader.locator = stored_locator
            assert await reader.retry_skipped() == 1
        assert (await contents(runtime, GROUP))[-1] == (
            "[图片：文字 丰巢快递柜取件码8848 请于今晚十点前取走]"
        )
    finally:
        await reader.aclose()
