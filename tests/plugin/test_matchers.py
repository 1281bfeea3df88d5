"""Matcher logic with nonebug: which events are answered, recorded or ignored, and what is stored.

nonebug skips the adapter's own event preparation, so ``adapt`` runs the adapter's reply / @ /
nickname checks on each event first, as the real adapter does before dispatching it.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

import pytest
from nonebot.adapters.onebot.v11 import (
    ActionFailed,
    Adapter,
    Bot,
    Event,
    Message,
    MessageEvent,
    MessageSegment,
)
from nonebot.adapters.onebot.v11.bot import _check_at_me, _check_nickname, _check_reply
from nonebug import App

from memory_core.conversation.engine import APOLOGY
from memory_core.distill.memory import ExtractedMemory
from memory_core.errors import LLMError
from memory_core.recall.options import RecallOptions
from tests.fakes import RecordingModel
from tests.plugin.events import (
    SELF_ID,
    at_seg,
    message_payload,
    recall_payload,
    reply_seg,
    self_sent_payload,
    text_seg,
)

EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
GROUP = 30003
USER = 20002


async def adapt(bot: Bot, payload: dict[str, Any]) -> Event:
    event = Adapter.json_to_event(payload)
    assert event is not None
    if isinstance(event, MessageEvent):
        await _check_reply(bot, event)
        _check_at_me(bot, event)
        _check_nickname(bot, event)
    return event


def text(value: str) -> Message:
    return Message(MessageSegment.text(value))


def quoted(message_id: int, value: str) -> Message:
    return MessageSegment.reply(message_id) + text(value)


async def stored(runtime: Any, user: int = USER, group: int | None = None) -> list[Any]:
    return await runtime.memory.parts.retriever.recent_turns(user, group, limit=50, since=EPOCH)


# ----------------------------------------------------------------------------- chat


async def test_small_talk_scored_not_kept_stays_in_the_next_prompt(app: App, runtime, model):
    model.answer = "是啊，要多穿点"
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        # QQ stamps messages to the second; this one was sent a few seconds ago.
        said = message_payload([text_seg("今天天气好冷啊")], sent_at=time.time() - 5)
        event = await adapt(bot, said)
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, text("是啊，要多穿点"), {"message_id": 601})
    # The evaluator's verdict "not kept" (score 5): both turns expire at once, as the "none"
    # band of config/retention.toml makes them.
    async with runtime.memory.parts.database.pool.acquire() as conn:
        assert await conn.execute("UPDATE dialogues SET score = 5, expires_at = created_at") == (
            "UPDATE 2"
        )
    recalled = await runtime.memory.parts.retriever.recall(
        USER, "天气好冷", options=RecallOptions(top_n=5, window_size=0)
    )
    assert recalled.turns == ()  # gone from long-term recall at once
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        # The answer comes two seconds after the bot's reply (stored just now).
        event = await adapt(
            bot, message_payload([text_seg("你那边冷不冷")], sent_at=time.time() + 2)
        )
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, text("是啊，要多穿点"), {"message_id": 602})
    # ... but the conversation of the last minutes still reaches the model.
    assert "今天天气好冷啊" in model.text() and "是啊，要多穿点" in model.text()


async def test_private_message_is_answered_and_both_turns_stored(app: App, runtime, model):
    payload = message_payload([text_seg("我叫小明")], nickname="小明")
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = await adapt(bot, payload)
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, text("好的"), {"message_id": 555})
    turns = await stored(runtime)
    assert [(t.role, t.content, t.message_id) for t in turns] == [
        ("user", "我叫小明", payload["message_id"]),
        ("assistant", "好的", 555),
    ]
    assert turns[0].sender_name == "小明" and turns[1].sender_name == "小诗"
    assert model.prompts[-1][-1]["content"].endswith("我叫小明")


async def test_group_cq_string_at_bot_is_answered_with_quote_and_stored_without_the_at(
    app: App, runtime
):
    payload = message_payload(
        [at_seg(SELF_ID), text_seg(" 我叫小明")],
        group_id=GROUP,
        cq_string=True,
        card="小明（群名片）",
        nickname="xm",
    )
    assert payload["message"] == "[CQ:at,qq=10001] 我叫小明"
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = await adapt(bot, payload)
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, quoted(payload["message_id"], "好的"), {"message_id": 556})
    turns = await stored(runtime, group=GROUP)
    assert [(t.role, t.content) for t in turns] == [("user", "我叫小明"), ("assistant", "好的")]
    assert turns[0].sender_name == "小明（群名片）"
    assert turns[0].session_key == f"{GROUP}:{USER}"


async def test_group_nickname_first_addresses_the_bot(app: App, runtime, model):
    payload = message_payload([text_seg("小诗，今天星期几")], group_id=GROUP)
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = await adapt(bot, payload)
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, quoted(payload["message_id"], "好的"), {"message_id": 1})
    assert model.prompts[-1][-1]["content"].endswith("今天星期几")


async def test_reply_to_the_bots_message_addresses_it_and_is_quoted(app: App, runtime, model):
    bot_message_id = 424242
    payload = message_payload([reply_seg(bot_message_id), text_seg("这是什么意思")], group_id=GROUP)
    original = {
        "time": 1760000000,
        "message_type": "group",
        "group_id": GROUP,  # get_msg names the group (NapCat, go-cqhttp, Lagrange)
        "message_id": bot_message_id,
        "real_id": bot_message_id,
        "sender": {"user_id": SELF_ID, "nickname": "bot"},
        # The bot's message quoted the one it answered, as group replies do.
        "message": [reply_seg(424241), text_seg("人生苦短\n我用Python")],
    }
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        ctx.should_call_api("get_msg", {"message_id": bot_message_id}, original)
        event = await adapt(bot, payload)
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, quoted(payload["message_id"], "好的"), {"message_id": 2})
    turns = await stored(runtime, group=GROUP)
    assert turns[0].content == "[回复 小诗: 人生苦短 我用Python] 这是什么意思"
    assert turns[0].content in model.prompts[-1][-1]["content"]


@pytest.mark.parametrize(
    ("group_id", "quoted_type", "quoted_group", "quoted_sender"),
    [
        (GROUP, "group", GROUP + 1, 30001),  # a message of another group
        (GROUP, "private", None, 30001),  # someone's private chat, quoted in a group
        (GROUP, "group", None, 30001),  # a group message that does not say which group
        (None, "private", None, 30001),  # another person's private chat with the bot
        (None, "group", None, 30001),  # a group's message, quoted in private
    ],
    ids=["other-group", "private-in-group", "group-unnamed", "other-private", "group-in-private"],
)
async def test_a_quote_from_another_chat_is_left_out_of_this_chats_memory(
    app: App, runtime, model, group_id, quoted_type, quoted_group, quoted_sender
):
    quoted_id = 515151
    payload = message_payload(
        [reply_seg(quoted_id), at_seg(SELF_ID), text_seg(" 这是什么意思")], group_id=group_id
    )
    original: dict[str, Any] = {
        "time": 1760000000,
        "message_type": quoted_type,
        "message_id": quoted_id,
        "real_id": quoted_id,
        "sender": {"user_id": quoted_sender, "nickname": "别人"},
        "message": [text_seg("我的银行卡密码是123456")],
    }
    if quoted_group is not None:
        original["group_id"] = quoted_group
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        ctx.should_call_api("get_msg", {"message_id": quoted_id}, original)
        event = await adapt(bot, payload)
        ctx.receive_event(bot, event)
        answer = quoted(payload["message_id"], "好的") if group_id else text("好的")
        ctx.should_call_send(event, answer, {"message_id": 9})
    turns = await stored(runtime, group=group_id)
    assert turns[0].content.endswith("这是什么意思")
    assert "银行卡" not in turns[0].content
    assert "银行卡" not in model.text()


async def test_media_faces_and_mentions_become_text_and_raw_segments_are_kept(
    app: App, runtime, model
):
    runtime.config = runtime.config.model_copy(update={"bot_resolve_at_names": True})
    segments = [
        at_seg(SELF_ID),
        text_seg(" 看"),
        {"type": "image", "data": {"summary": "", "file": "A.jpg", "url": "https://x/y"}},
        {"type": "face", "data": {"id": "178", "raw": {"faceIndex": 178, "faceText": "/斜眼笑"}}},
        text_seg(" "),
        at_seg(30001),
        text_seg(" [CQ:at,qq=all]"),
    ]
    payload = message_payload(segments, group_id=GROUP)
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = await adapt(bot, payload)
        ctx.receive_event(bot, event)
        ctx.should_call_api(
            "get_group_member_info",
            {"group_id": GROUP, "user_id": 30001},
            {"group_id": GROUP, "user_id": 30001, "nickname": "bob", "card": "Bob"},
        )
        ctx.should_call_send(event, quoted(payload["message_id"], "好的"), {"message_id": 3})
    turns = await stored(runtime, group=GROUP)
    # User text that looks like CQ code stays literal text.
    assert turns[0].content == "看[图片][表情:斜眼笑] @Bob [CQ:at,qq=all]"


async def test_unaddressed_group_message_is_ignored_unless_recording_is_enabled(
    app: App, runtime, model
):
    first = message_payload([text_seg("大家好")], group_id=GROUP)
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        ctx.receive_event(bot, await adapt(bot, first))
    assert await stored(runtime, group=GROUP) == []

    runtime.config = runtime.config.model_copy(update={"bot_record_unaddressed": True})
    second = message_payload([text_seg("我下周去上海")], group_id=GROUP)
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        ctx.receive_event(bot, await adapt(bot, second))
    assert [t.content for t in await stored(runtime, group=GROUP)] == ["我下周去上海"]
    assert model.prompts == []  # recorded, not answered


async def test_denied_and_not_allowed_groups_are_ignored_entirely(app: App, runtime, model):
    runtime.config = runtime.config.model_copy(
        update={"bot_group_allowlist": {GROUP, 40004}, "bot_group_denylist": {40004}}
    )
    for group in (40004, 50005):
        payload = message_payload([at_seg(SELF_ID), text_seg(" 你好")], group_id=group)
        async with app.test_matcher() as ctx:
            bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
            ctx.receive_event(bot, await adapt(bot, payload))
        assert await stored(runtime, group=group) == []
    assert model.prompts == []


async def test_own_messages_and_repeated_events_are_not_input(app: App, runtime, model):
    payload = message_payload([text_seg("在吗")])
    own = message_payload([text_seg("我自己发的")], user_id=SELF_ID)
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = await adapt(bot, payload)
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, text("好的"), {"message_id": 7})
        ctx.receive_event(bot, await adapt(bot, dict(payload)))  # delivered twice
        ctx.receive_event(bot, await adapt(bot, own))
        ctx.receive_event(bot, await adapt(bot, self_sent_payload("pong", group_id=GROUP)))
    assert len(model.prompts) == 1
    assert [t.role for t in await stored(runtime)] == ["user", "assistant"]
    assert await stored(runtime, user=SELF_ID) == []


async def test_two_members_messages_with_one_id_are_both_stored_and_a_recall_takes_one(
    app: App, runtime, model
):
    # NapCat's and go-cqhttp's message ids are 32-bit hashes: B's message may reuse A's id.
    runtime.config = runtime.config.model_copy(update={"bot_record_unaddressed": True})
    alice = message_payload([text_seg("我是甲")], user_id=USER, group_id=GROUP, message_id=4242)
    bob = message_payload([text_seg("我是乙")], user_id=USER + 1, group_id=GROUP, message_id=4242)
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        ctx.receive_event(bot, await adapt(bot, alice))
        ctx.receive_event(bot, await adapt(bot, bob))
    assert [t.content for t in await stored(runtime, group=GROUP)] == ["我是甲"]
    assert [t.content for t in await stored(runtime, USER + 1, group=GROUP)] == ["我是乙"]
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        notice = recall_payload(4242, user_id=USER + 1, group_id=GROUP)
        ctx.receive_event(bot, await adapt(bot, notice))
    assert [t.content for t in await stored(runtime, group=GROUP)] == ["我是甲"]
    assert await stored(runtime, USER + 1, group=GROUP) == []


@pytest.fixture
def warnings() -> Any:
    from nonebot.log import logger

    from nonebot_plugin_temporal_memory import intake

    intake.odd_group_events.said = False
    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING", format="{message}")
    yield lines
    logger.remove(sink)


@pytest.mark.parametrize("group_id", ["群30003", "", None, 30003.5])
async def test_a_group_message_without_an_integer_group_is_dropped_said_once(
    app: App, runtime, model, warnings, group_id
):
    # Read as a plain MessageEvent by the adapter, it used to be answered and stored as the
    # sender's private chat, past BOT_GROUP_ALLOWLIST.
    runtime.config = runtime.config.model_copy(update={"bot_group_allowlist": {40004}})
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        for text_said in ("你好", "再说一次"):
            payload = message_payload([at_seg(SELF_ID), text_seg(text_said)], group_id=GROUP)
            payload["group_id"] = group_id
            event = await adapt(bot, payload)
            assert type(event) is MessageEvent and event.message_type == "group"
            ctx.receive_event(bot, event)
    assert model.prompts == []
    assert await stored(runtime) == []
    dropped = [line for line in warnings if "dropped" in line]
    assert len(dropped) == 1 and "\n" not in dropped[0].strip(), warnings
    assert "is no integer" in dropped[0]


async def test_recall_notices_delete_the_recalled_exchange(app: App, runtime):
    group_payload = message_payload([at_seg(SELF_ID), text_seg(" 密码是1234")], group_id=GROUP)
    private_payload = message_payload([text_seg("我的银行卡号是6222")])
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        for payload, reply_id in ((group_payload, 71), (private_payload, 72)):
            event = await adapt(bot, payload)
            ctx.receive_event(bot, event)
            expected = text("好的")
            if "group_id" in payload:
                expected = quoted(payload["message_id"], "好的")
            ctx.should_call_send(event, expected, {"message_id": reply_id})
        ctx.receive_event(
            bot,
            await adapt(
                bot, recall_payload(group_payload["message_id"], user_id=USER, group_id=GROUP)
            ),
        )
        ctx.receive_event(bot, await adapt(bot, recall_payload(72, user_id=SELF_ID)))
    # The user's group message goes with the bot's reply to it; the bot's own recalled private
    # reply goes alone.
    assert [t.content for t in await stored(runtime, group=GROUP)] == []
    assert [t.content for t in await stored(runtime)] == ["我的银行卡号是6222"]


async def test_a_recalled_secret_never_reaches_a_later_prompt(app: App, runtime, model):
    model.answer = "好的，记住啦：你的银行卡密码是778899。"
    secret = message_payload(
        [text_seg("我的银行卡密码是778899，别告诉别人")], sent_at=time.time() - 9
    )
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = await adapt(bot, secret)
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, text(model.answer), {"message_id": 611})
    # Distilled from the exchange (as the extraction worker would have, had it run already).
    source_ids = [t.id for t in await stored(runtime)]
    await runtime.memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content="用户的银行卡密码是778899")],
        USER,
        source_turn_ids=source_ids,
    )
    model.answer = "我不知道呢"
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        ctx.receive_event(bot, await adapt(bot, recall_payload(secret["message_id"], user_id=USER)))
        question = await adapt(bot, message_payload([text_seg("我的银行卡密码是多少？")]))
        ctx.receive_event(bot, question)
        ctx.should_call_send(question, text("我不知道呢"), {"message_id": 612})
    assert "778899" not in model.text()
    assert await runtime.memory.parts.keeper.recall_by_type(USER, None, "facts") == []


async def test_the_prompt_says_who_speaks_in_which_group(app: App, runtime, model):
    from nonebot_plugin_temporal_memory.intake import group_names

    runtime.config = runtime.config.model_copy(update={"bot_resolve_group_names": True})
    group_names._cache = type(group_names._cache)()
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        for i, said in enumerate(("周五的周会改到下午三点", "记一下")):
            payload = message_payload(
                [at_seg(SELF_ID), text_seg(f" {said}")], group_id=GROUP, card="小明"
            )
            event = await adapt(bot, payload)
            ctx.receive_event(bot, event)
            if i == 0:  # looked up once, then cached
                ctx.should_call_api(
                    "get_group_info",
                    {"group_id": GROUP},
                    {"group_id": GROUP, "group_name": "读书会"},
                )
            ctx.should_call_send(event, quoted(payload["message_id"], "好的"), {"message_id": 9})
    # The group in the system prompt (the same for every member), the speaker with the message.
    assert "这是群聊「读书会」（群号 30003）。" in model.prompts[-1][0]["content"]
    assert "现在对你说话的是群成员小明（QQ 20002）" in model.prompts[-1][-1]["content"]
    assert model.prompts[-1][-1]["content"].endswith("小明: 记一下")


async def test_the_prompt_says_a_private_chat_is_private(app: App, runtime, model):
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = await adapt(bot, message_payload([text_seg("在吗")], nickname="阿强"))
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, text("好的"), {"message_id": 10})
    assert "这是与阿强（QQ 20002）的私聊。" in model.prompts[-1][0]["content"]
    assert model.prompts[-1][-1]["content"].endswith("阿强: 在吗")


# ----------------------------------------------------------------------------- failures


async def test_model_failure_gives_apology_and_keeps_the_user_turn(app: App, runtime, model):
    model.fail = LLMError("HTTP 503")
    payload = message_payload([text_seg("明天提醒我交报告")])
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = await adapt(bot, payload)
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, text(APOLOGY), {"message_id": 8})
    assert [(t.role, t.content) for t in await stored(runtime)] == [("user", "明天提醒我交报告")]


async def test_send_failure_is_caught_and_the_unsent_reply_not_stored(app: App, runtime):
    payload = message_payload([text_seg("你好")])
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = await adapt(bot, payload)
        ctx.receive_event(bot, event)
        ctx.should_call_send(
            event, text("好的"), exception=ActionFailed(retcode=100, status="failed")
        )
    assert [t.role for t in await stored(runtime)] == ["user"]


async def test_long_reply_is_split_and_stored_once_with_the_first_message_id(
    app: App, runtime, model
):
    runtime.settings = runtime.settings.model_copy(update={"chat_reply_max_chars": 50})
    model.answer = "第一段" * 10 + "\n" + "第二段" * 10
    payload = message_payload([text_seg("讲个长故事")])
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = await adapt(bot, payload)
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, text("第一段" * 10), {"message_id": 81})
        ctx.should_call_send(event, text("第二段" * 10), {"message_id": 82})
    reply = (await stored(runtime))[-1]
    assert reply.content == model.answer and reply.message_id == 81


def test_recording_model_is_a_chat_model() -> None:
    from memory_core.providers.llm import ChatModel

    model: ChatModel = RecordingModel()
    assert model is not None
