"""Admin commands with nonebug: permissions, the /forget confirmation, what each one answers.

In a group every command answer quotes the command (``run`` expects the reply segment)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from nonebot.adapters.onebot.v11 import (
    Adapter,
    Bot,
    Event,
    GroupMessageEvent,
    Message,
    MessageEvent,
    MessageSegment,
)
from nonebug import App

from memory_core.distill.memory import ExtractedMemory
from memory_core.models import TurnInput
from tests.plugin.events import SELF_ID, SUPERUSER_ID, message_payload, text_seg

EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
GROUP = 30003
USER = 20002
THEN = datetime.now(timezone.utc) - timedelta(hours=2)


def event_of(
    value: str, *, user_id: int = USER, group_id: int | None = None, to_me: bool = False
) -> Event:
    """A message event; in a group ``to_me`` is what the adapter sets for an @ of the bot, a
    reply to it or its nickname first (nonebug skips the adapter's own checks)."""
    payload = message_payload([text_seg(value)], user_id=user_id, group_id=group_id)
    event = Adapter.json_to_event(payload)
    assert isinstance(event, MessageEvent)
    event.to_me = group_id is None or to_me  # what the adapter sets for private chats
    return event


def to_bot(value: str, **kwargs: Any) -> Event:
    """``value`` said to the bot (in a group: with an @ of it)."""
    return event_of(value, to_me=True, **kwargs)


def text(value: str) -> Message:
    return Message(MessageSegment.text(value))


async def seed(runtime: Any) -> None:
    """Rows in four sessions: USER in GROUP, USER private, another user in GROUP, USER in 40004."""
    for user, group, content in (
        (USER, GROUP, "我的猫叫咪咪"),
        (USER, None, "我的狗叫旺财"),
        (30001, GROUP, "我的鱼叫泡泡"),
        (USER, 40004, "我的鸟叫啾啾"),
    ):
        await runtime.memory.parts.writer.add_turn(
            TurnInput(
                user_id=user,
                group_id=group,
                role="user",
                content=content,
                sender_name="小明",
                created_at=THEN,
            )
        )


async def contents(runtime: Any, user: int, group: int | None) -> list[str]:
    return [
        t.content
        for t in await runtime.memory.parts.retriever.recent_turns(
            user, group, limit=50, since=EPOCH
        )
    ]


def answer_to(event: Event, value: str) -> Message:
    """What the bot sends: in a group, quoting the message it answers."""
    if isinstance(event, GroupMessageEvent):
        return MessageSegment.reply(event.message_id) + text(value)
    return text(value)


class StartsWith:
    """An expected message that only has to begin with ``head`` (after any quote)."""

    def __init__(self, head: str) -> None:
        self.head = head

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Message) and other.extract_plain_text().startswith(self.head)


Expected = str | StartsWith


async def run(app: App, *steps: tuple[Event, Expected | list[Expected] | None]) -> None:
    """Send each event; expect the bot to answer with the given text, or these texts in
    order (None: no answer)."""
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        for event, answer in steps:
            ctx.receive_event(bot, event)
            for value in answer if isinstance(answer, list) else [answer] if answer else []:
                expected = answer_to(event, value) if isinstance(value, str) else value
                ctx.should_call_send(event, expected, {"message_id": 1})


# ----------------------------------------------------------------------------- /forget

ASK = "删除后无法恢复。请在 60 秒内回复“确认”，回复“取消”放弃。"
ASK_IN_GROUP = "删除后无法恢复。请在 60 秒内 @我 或引用这条消息回复“确认”，回复“取消”放弃。"
ASK_ALL = "删除后无法恢复。请在 60 秒内回复“确认删除全部”，回复“取消”放弃。"
GROUP_PROMPT = f"将删除你在本群的记忆：对话 1 条。{ASK_IN_GROUP}"
PRIVATE_PROMPT = f"将删除你在私聊中的记忆：对话 1 条。{ASK}"
DROPPED = "已取消删除：没有收到“确认”。"
HINT = "要删除的话请 @我 回复“确认”（或引用我的提问回复）。"
NOTHING_ASKED = "现在没有待确认的删除。"


async def test_forget_own_group_session_after_confirmation_only(app: App, runtime, model):
    await seed(runtime)
    await run(
        app,
        (event_of("/forget", group_id=GROUP), GROUP_PROMPT),
        (to_bot("确认", group_id=GROUP), "已删除你在本群的记忆：对话 1 条。"),
    )
    assert await contents(runtime, USER, GROUP) == []
    assert await contents(runtime, USER, None) == ["我的狗叫旺财"]
    assert await contents(runtime, 30001, GROUP) == ["我的鱼叫泡泡"]
    assert await contents(runtime, USER, 40004) == ["我的鸟叫啾啾"]
    # Neither the command nor the confirmation reached the chat model or the store.
    assert model.prompts == []


async def test_forget_also_removes_the_sessions_distilled_memories(app: App, runtime):
    await seed(runtime)
    for group, fact in ((GROUP, "用户是老师"), (None, "用户养了一条狗")):
        await runtime.memory.parts.keeper.save(
            [ExtractedMemory(kind="facts", content=fact)], USER, group, stated_at=THEN
        )
    await run(
        app,
        (
            event_of("/forget", group_id=GROUP),
            f"将删除你在本群的记忆：对话 1 条、事实 1 条。{ASK_IN_GROUP}",
        ),
        (to_bot("确认", group_id=GROUP), "已删除你在本群的记忆：对话 1 条、事实 1 条。"),
    )
    assert await runtime.memory.parts.keeper.recall_by_type(USER, GROUP, "facts") == []
    [kept] = await runtime.memory.parts.keeper.recall_by_type(USER, None, "facts")
    assert kept.content == "用户养了一条狗"


async def test_forget_in_private_chat_uses_the_chinese_alias_and_can_be_cancelled(
    app: App, runtime
):
    await seed(runtime)
    await run(
        app,
        (event_of("/忘记"), PRIVATE_PROMPT),
        (event_of("取消"), "已取消，记忆保持不变。"),
    )
    assert await contents(runtime, USER, None) == ["我的狗叫旺财"]
    await run(
        app,
        (event_of("/忘记"), PRIVATE_PROMPT),
        (event_of("确认"), "已删除你在私聊中的记忆：对话 1 条。"),
    )
    assert await contents(runtime, USER, None) == []
    assert await contents(runtime, USER, GROUP) == ["我的猫叫咪咪"]


async def test_confirmation_expires(app: App, runtime, model, monkeypatch):
    from nonebot_plugin_temporal_memory.commands import forget

    await seed(runtime)
    monkeypatch.setattr(forget, "CONFIRM_TIMEOUT", 0.05)
    await run(
        app,
        (
            event_of("/forget"),
            "将删除你在私聊中的记忆：对话 1 条。删除后无法恢复。"
            "请在 0.05 秒内回复“确认”，回复“取消”放弃。",
        ),
    )
    await asyncio.sleep(0.1)
    # Too late: nothing is deleted, and the bot says so instead of chatting about "确认".
    await run(
        app, (event_of("确认"), "确认已超时，未删除任何记忆。如仍要删除，请重新发送 /forget。")
    )
    assert await contents(runtime, USER, None) == ["我的狗叫旺财"]
    assert model.prompts == []
    # The late answer settled the request: the next 确认 has nothing to answer.
    await run(app, (event_of("确认"), NOTHING_ASKED))
    assert model.prompts == []


async def test_forget_takes_only_an_explicit_yes_with_any_punctuation(app: App, runtime, model):
    for yes in ("确认。", "确定", "确认！", " 确 定 ", "确认～", "确认!!"):
        await seed(runtime)
        await run(
            app,
            (event_of("/forget"), PRIVATE_PROMPT),
            (event_of(yes), "已删除你在私聊中的记忆：对话 1 条。"),
        )
        assert await contents(runtime, USER, None) == [], yes
    assert model.prompts == []


async def test_a_bare_yes_in_private_confirms_nothing_and_is_answered_as_chat(
    app: App, runtime, model
):
    await seed(runtime)
    for yes in ("好", "好的", "嗯", "是的", "OK"):
        # The question goes (said once), and the message is chat like any other.
        prompt = StartsWith("将删除你在私聊中的记忆：对话 ")
        await run(app, (event_of("/forget"), prompt), (event_of(yes), [DROPPED, "好的"]))
        assert (await contents(runtime, USER, None))[0] == "我的狗叫旺财", yes
    assert len(model.prompts) == 5
    # A 确认 now is no late answer to a dropped question, and no chat either.
    await run(app, (event_of("确认"), NOTHING_ASKED))
    assert (await contents(runtime, USER, None))[0] == "我的狗叫旺财"
    assert len(model.prompts) == 5


async def test_an_unaddressed_yes_in_a_group_gets_no_reply_deletes_nothing_and_the_question_stays(
    app: App, runtime, model
):
    await seed(runtime)
    runtime.config = runtime.config.model_copy(update={"bot_record_unaddressed": True})
    await run(
        app,
        (event_of("/forget", group_id=GROUP), GROUP_PROMPT),
        # Someone else speaks in between; then the asker answers them, not the bot.
        (event_of("小红，晚上一起吃饭吗？", user_id=30001, group_id=GROUP), None),
        (event_of("好", group_id=GROUP), None),
        (event_of("好的", group_id=GROUP), None),
        (event_of("嗯", group_id=GROUP), None),
    )
    # Nothing went, and the asker's "好" was recorded like any group message.
    assert await contents(runtime, USER, GROUP) == ["我的猫叫咪咪", "好", "好的", "嗯"]
    assert model.prompts == []
    # The question is still open: said to the bot, 确认 deletes.
    await run(app, (to_bot("确认", group_id=GROUP), "已删除你在本群的记忆：对话 4 条。"))
    assert await contents(runtime, USER, GROUP) == []


async def test_an_unaddressed_yes_in_a_group_gets_one_hint_and_the_question_stays(
    app: App, runtime, model
):
    await seed(runtime)
    await run(
        app,
        (event_of("/forget", group_id=GROUP), GROUP_PROMPT),
        (event_of("确认", group_id=GROUP), HINT),
        (event_of("确认！", group_id=GROUP), None),  # one hint, not one a message
        (to_bot("确认", group_id=GROUP), "已删除你在本群的记忆：对话 1 条。"),
    )
    assert await contents(runtime, USER, GROUP) == []
    assert model.prompts == []


async def test_a_lone_yes_with_no_question_open_is_told_so_and_reaches_no_model(
    app: App, runtime, model
):
    await seed(runtime)
    await run(
        app,
        (event_of("确认"), NOTHING_ASKED),
        (event_of("确定。"), NOTHING_ASKED),
        (to_bot("确认", group_id=GROUP), NOTHING_ASKED),
        (event_of("确认删除全部"), NOTHING_ASKED),
    )
    assert model.prompts == []
    # Said to someone else in a group, it is none of the bot's business.
    await run(app, (event_of("确认", group_id=GROUP), None))
    assert await contents(runtime, USER, None) == ["我的狗叫旺财"]


async def test_ordinary_chat_drops_the_question_once_and_is_still_answered(
    app: App, runtime, model
):
    await seed(runtime)
    await run(
        app,
        (event_of("/forget"), PRIVATE_PROMPT),
        (event_of("今天天气怎么样"), [DROPPED, "好的"]),
        (event_of("确认"), NOTHING_ASKED),  # dropped: no late answer either
    )
    stored = await contents(runtime, USER, None)
    assert stored == ["我的狗叫旺财", "今天天气怎么样", "好的"]
    assert len(model.prompts) == 1


async def test_a_command_after_the_question_drops_it_and_runs(app: App, runtime):
    await seed(runtime)
    await run(
        app,
        (event_of("/forget"), PRIVATE_PROMPT),
        (event_of("/记住 我的生日是五月三日"), [DROPPED, "记住了，这条会一直保留。"]),
    )
    assert await contents(runtime, USER, None) == ["我的狗叫旺财", "我的生日是五月三日"]


async def test_a_command_in_a_group_is_said_to_the_bot_and_drops_the_question(app: App, runtime):
    await seed(runtime)
    await run(
        app,
        (event_of("/forget", group_id=GROUP), GROUP_PROMPT),
        (
            event_of("/记住 周会改到周四", group_id=GROUP),
            [DROPPED, "记住了，这条会一直保留。"],
        ),
        (to_bot("确认", group_id=GROUP), NOTHING_ASKED),
    )
    assert await contents(runtime, USER, GROUP) == ["我的猫叫咪咪", "周会改到周四"]


async def test_forget_accepts_the_usual_ways_of_saying_no(app: App, runtime, model):
    await seed(runtime)
    for no in ("算了，我再想想", "不了", "取消。", "别删"):
        await run(
            app,
            (event_of("/forget"), PRIVATE_PROMPT),
            (event_of(no), "已取消，记忆保持不变。"),
        )
    assert await contents(runtime, USER, None) == ["我的狗叫旺财"]
    assert model.prompts == []


async def test_commands_also_start_with_a_full_width_slash_or_the_chinese_ime_mark(
    app: App, runtime
):
    await seed(runtime)
    for prefix in ("／", "、"):
        await run(
            app,
            (event_of(f"{prefix}forget"), PRIVATE_PROMPT),
            (event_of("取消"), "已取消，记忆保持不变。"),
        )


async def test_forget_with_nothing_stored_says_so_and_asks_nothing(app: App, runtime, model):
    await run(
        app,
        (event_of("/forget"), "你在私聊中没有可删除的记忆，什么也没有删。"),
        (event_of("确认"), NOTHING_ASKED),  # nothing was asked
    )
    assert model.prompts == []


async def test_forget_other_targets_is_refused_for_ordinary_users(app: App, runtime):
    await seed(runtime)
    refusal = "只有超级用户可以删除其他人、整个群或全部的记忆。"
    await run(
        app,
        (event_of("/forget user 30001", group_id=GROUP), refusal),
        (event_of("/forget group 30003"), refusal),
        (event_of("/forget all"), refusal),
        (event_of("确认"), NOTHING_ASKED),  # nothing was pending
    )
    assert await contents(runtime, 30001, GROUP) == ["我的鱼叫泡泡"]


async def test_superuser_forgets_a_user_everywhere_or_a_whole_group(app: App, runtime):
    await seed(runtime)
    su = {"user_id": SUPERUSER_ID}
    await run(
        app,
        (
            event_of("/forget user 20002", **su),
            f"将删除用户 20002 在所有会话中的记忆：对话 3 条。{ASK}",
        ),
        (event_of("确认", **su), "已删除用户 20002 在所有会话中的记忆：对话 3 条。"),
        (event_of("/forget group 30003", **su), f"将删除群 30003 中所有人的记忆：对话 1 条。{ASK}"),
        (event_of("确认", **su), "已删除群 30003 中所有人的记忆：对话 1 条。"),
    )
    assert (await runtime.memory.stats()).total_rows == 0


ALL_PROMPT = f"将删除所有人的记忆：对话 4 条。{ASK_ALL}"


async def test_forget_all_takes_only_the_full_phrase(app: App, runtime, model):
    await seed(runtime)
    su = {"user_id": SUPERUSER_ID}
    await run(
        app,
        (event_of("/forget all", **su), ALL_PROMPT),
        (event_of("好的", **su), ["已取消删除：没有收到“确认删除全部”。", "好的"]),
        (event_of("/forget all", **su), f"将删除所有人的记忆：对话 6 条。{ASK_ALL}"),
        (
            event_of("确认", **su),
            "已取消删除：删除全部要回复“确认删除全部”。如仍要删除，请重新发送命令。",
        ),
    )
    assert (await runtime.memory.stats()).total_rows == 4 + 2  # the seeds, and the chat
    await run(
        app,
        (event_of("/forget all", **su), f"将删除所有人的记忆：对话 6 条。{ASK_ALL}"),
        (event_of("确认删除全部！", **su), "已删除所有人的记忆：对话 6 条。"),
    )
    assert (await runtime.memory.stats()).total_rows == 0


async def test_confirmation_belongs_to_the_person_who_asked(app: App, runtime):
    await seed(runtime)
    su = {"user_id": SUPERUSER_ID, "group_id": GROUP}
    all_in_group = f"将删除所有人的记忆：对话 4 条。{ASK_IN_GROUP.replace('确认', '确认删除全部')}"
    await run(
        app,
        (event_of("/forget all", **su), all_in_group),
        # Someone else saying it to the bot in the same group confirms nothing of theirs.
        (to_bot("确认删除全部", user_id=USER, group_id=GROUP), NOTHING_ASKED),
        # The asker saying it to the group, not to the bot, confirms nothing either.
        (
            event_of("确认删除全部", **su),
            "要删除的话请 @我 回复“确认删除全部”（或引用我的提问回复）。",
        ),
    )
    assert (await contents(runtime, USER, GROUP))[0] == "我的猫叫咪咪"
    assert (await runtime.memory.stats()).total_rows == 4


def test_answers_are_read_as_one_word(plugin: Any) -> None:
    from nonebot_plugin_temporal_memory.commands.forget import answer_kind

    for yes in ("确认", "确定。", " 确认！", "\u3000确定\u3000", "确认~", "确定?!", "确认，"):
        assert answer_kind(yes) == "yes", yes
    for other in ("好", "好的", "嗯", "是", "对", "ok", "ＯＫ", "y", "yes", "确认一下", "可以"):
        assert answer_kind(other) is None, other
    assert answer_kind("确认删除全部。") == "all"
    assert answer_kind("取消") == answer_kind("算了，我再想想") == "no"


def test_forget_targets_parse(plugin: Any) -> None:
    from memory_core.models import ForgetScope
    from nonebot_plugin_temporal_memory.commands.forget import parse_forget_target

    assert parse_forget_target(["all"]) == (ForgetScope(everything=True), "所有人")
    assert parse_forget_target(["用户", "123"]) == (
        ForgetScope(user_id=123),
        "用户 123 在所有会话中",
    )
    assert parse_forget_target(["群", "456"]) == (ForgetScope(group_id=456), "群 456 中所有人")
    assert parse_forget_target(["user", "abc"]) is None
    assert parse_forget_target(["delete", "everything"]) is None


# ----------------------------------------------------------------------------- /memstat


MEMSTAT_NOW = datetime(2026, 11, 30, 14, 5, tzinfo=timezone.utc)  # 22:05 in Shanghai


@pytest.fixture
def stopped_clock(runtime, monkeypatch):
    from nonebot_plugin_temporal_memory.commands import memstat

    monkeypatch.setattr(memstat, "now_utc", lambda: MEMSTAT_NOW)
    runtime.started_at = MEMSTAT_NOW - timedelta(hours=3, minutes=7)


async def expected_dashboard(runtime: Any) -> str:
    from memory_core.console.dashboard import Connection, DatabaseState, dashboard_zh

    connection = Connection(
        database=DatabaseState.CONNECTED,
        embedded=runtime.settings.memory_dsn is None,
        chat_model=runtime.settings.llm_model,
        uptime=timedelta(hours=3, minutes=7),
    )
    return dashboard_zh(
        await runtime.memory.stats(MEMSTAT_NOW),
        await runtime.memory.distilled_stats(MEMSTAT_NOW),
        connection,
        now=MEMSTAT_NOW,
        tz=runtime.memory.parts.tz,
    )


async def test_memstat_is_for_superusers_and_answers_a_private_chat_with_the_dashboard(
    app: App, runtime, stopped_clock
):
    await seed(runtime)
    await run(app, (event_of("/memstat"), "只有超级用户可以查看记忆统计。"))
    dashboard = await expected_dashboard(runtime)
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = event_of("/记忆统计", user_id=SUPERUSER_ID)
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, text(dashboard), {"message_id": 1})
    lines = dashboard.split("\n")
    assert lines[0].endswith("（截至 22:05）")
    assert "【存储】" in lines and "【连接】" in lines
    assert lines[2].startswith("对话 4 条 · 会话 4 个")
    assert "已运行：3 小时 7 分" in lines
    assert "回答缓存：未开启" in lines


async def test_memstat_in_a_group_goes_privately_to_the_superuser(app: App, runtime, stopped_clock):
    await seed(runtime)
    dashboard = await expected_dashboard(runtime)
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = event_of("/memstat", user_id=SUPERUSER_ID, group_id=GROUP)
        ctx.receive_event(bot, event)
        ctx.should_call_api(
            "send_private_msg",
            {"user_id": SUPERUSER_ID, "message": text(dashboard)},
            {"message_id": 5},
        )
        ctx.should_call_send(
            event,
            MessageSegment.reply(event.message_id) + text("记忆统计已私聊发给你。"),
            {"message_id": 6},
        )


async def test_memstat_in_a_group_says_so_when_the_private_message_fails(
    app: App, runtime, stopped_clock
):
    from nonebot.adapters.onebot.v11 import ActionFailed

    dashboard = await expected_dashboard(runtime)
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = event_of("/memstat", user_id=SUPERUSER_ID, group_id=GROUP)
        ctx.receive_event(bot, event)
        ctx.should_call_api(
            "send_private_msg",
            {"user_id": SUPERUSER_ID, "message": text(dashboard)},
            exception=ActionFailed(retcode=100, msg="not a friend"),
        )
        ctx.should_call_send(
            event,
            MessageSegment.reply(event.message_id)
            + text("记忆统计没能私聊发给你（可先加机器人为好友），为保护数据不在群里公布。"),
            {"message_id": 6},
        )


# ----------------------------------------------------------------------------- /recall


def memory_line(runtime: Any, content: str) -> str:
    stamp = THEN.astimezone(runtime.memory.parts.tz).strftime("%Y-%m-%d %H:%M:%S")
    return f"[{stamp}] (2小时前) user(小明): {content}"


async def test_recall_shows_own_session_memory_lines(app: App, runtime):
    await seed(runtime)
    await run(
        app,
        (
            event_of("/回忆 猫叫什么", group_id=GROUP),
            f"与“猫叫什么”相关的记忆（群 {GROUP}）：\n· 2小时前 你：我的猫叫咪咪\n"
            "加 --full 查看带上下文的完整记忆。",
        ),
    )


async def test_recall_is_a_short_numbered_list_with_the_facts_the_model_gets(app: App, runtime):
    for i in range(8):
        await runtime.memory.parts.writer.add_turn(
            TurnInput(
                user_id=USER,
                role="user",
                content=f"我的第{i}个订单号是JD{i:04d}，" + "这是一段很长的补充说明" * 6,
                created_at=THEN + timedelta(minutes=i),
            )
        )
    await runtime.memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content="用户的订单常在京东下")], USER, stated_at=THEN
    )
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = event_of("/recall 订单")
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, ANY_TEXT, {"message_id": 1})
    [answer] = ANY_TEXT.seen
    lines = answer.splitlines()
    items = [line for line in lines if line.startswith("· ") and "你：" in line]
    # The lines the prompt would carry (its allowance: three anchors' windows), one a line.
    assert len(items) >= 5 and all("小时前 你：我的第" in line for line in items)
    assert all(len(line) <= 60 for line in lines)
    assert "事实（会提供给模型）：" in lines and "· 用户的订单常在京东下" in lines
    assert "user" not in answer and "assistant" not in answer and "相关记忆 ---" not in answer


async def test_recall_of_other_sessions_needs_a_superuser(app: App, runtime):
    from nonebot_plugin_temporal_memory.commands.recall import RECALL_USAGE

    await seed(runtime)
    await run(
        app,
        (event_of("/recall --user 30001 --group 30003 鱼"), "只有超级用户可以查看其他会话的记忆。"),
        (event_of("/recall"), RECALL_USAGE),
        (
            event_of("/recall --user 30001 --group 30003 鱼", user_id=SUPERUSER_ID),
            "与“鱼”相关的记忆（群 30003 · 用户 30001）：\n· 2小时前 TA：我的鱼叫泡泡\n"
            "加 --full 查看带上下文的完整记忆。",
        ),
        (
            event_of("/recall --full --user 30001 --group 30003 鱼", user_id=SUPERUSER_ID),
            "与“鱼”相关的对话（群 30003 · 用户 30001，完整）：\n--- 相关记忆 ---\n"
            + memory_line(runtime, "我的鱼叫泡泡"),
        ),
    )


async def test_another_chats_recall_asked_in_a_group_goes_privately_to_the_superuser(
    app: App, runtime
):
    await seed(runtime)
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        # In group 30003, the superuser asks about user 30001's private chat.
        event = event_of("/recall --user 30001 --private 鱼", user_id=SUPERUSER_ID, group_id=GROUP)
        ctx.receive_event(bot, event)
        ctx.should_call_api("send_private_msg", ANY_PRIVATE, {"message_id": 5})
        ctx.should_call_send(
            event,
            MessageSegment.reply(event.message_id)
            + text("其他会话的记忆已私聊发给你（不在群里公开）。"),
            {"message_id": 6},
        )
    assert ANY_PRIVATE.seen[0]["user_id"] == SUPERUSER_ID


class _AnyPrivate:
    """Matches the parameters of any private send, keeping them."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def __eq__(self, other: object) -> bool:
        assert isinstance(other, dict)
        self.seen.append(other)
        return True


ANY_PRIVATE = _AnyPrivate()


async def say(runtime: Any, *lines: tuple[str, str], message_id: int | None = None) -> None:
    """Store (role, text) turns of USER in GROUP, a minute apart, two hours ago and earlier."""
    for i, (role, content) in enumerate(lines):
        await runtime.memory.parts.writer.add_turn(
            TurnInput(
                user_id=USER,
                group_id=GROUP,
                role=role,  # type: ignore[arg-type]
                content=content,
                message_id=message_id if role == "user" else None,
                created_at=THEN - timedelta(minutes=i),
            )
        )


async def test_recall_of_a_word_never_said_finds_nothing_and_lists_nothing(app: App, runtime):
    await say(
        runtime,
        ("user", "周会改到周四下午三点"),
        ("assistant", "好的，周会改到周四下午三点，我记住了。"),
        ("user", "我的猫叫咪咪"),
        ("assistant", "咪咪这个名字真可爱！"),
        ("user", "今天中午吃了牛肉面"),
    )
    await run(
        app,
        (
            event_of("/recall 潜水艇", group_id=GROUP),
            f"在群 {GROUP} 中没有找到与“潜水艇”相关的记忆。",
        ),
    )


async def test_recall_of_a_said_word_lists_it_once_with_its_relative_time(app: App, runtime):
    await say(
        runtime,
        ("user", "周会几点？"),
        ("user", "周会几点？"),
        ("assistant", "周会几点？我查一下。"),
        ("user", "周会几点？"),
        ("user", "周会改到周四下午三点"),
        ("user", "我的猫叫咪咪"),
    )
    ANY_TEXT.seen.clear()
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = event_of("/回忆 周会", group_id=GROUP)
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, ANY_TEXT, {"message_id": 1})
    [answer] = ANY_TEXT.seen
    items = sorted(line for line in answer.splitlines() if line.startswith("· "))
    # The bot's "周会几点？我查一下。" only repeats the question: the prompt carries it once,
    # and so does the list.
    assert items == ["· 2小时前 你：周会几点？", "· 2小时前 你：周会改到周四下午三点"]
    assert answer.startswith(f"与“周会”相关的记忆（群 {GROUP}）：\n")


async def test_recall_cuts_a_long_line_around_the_match_keeping_the_digits(app: App, runtime):
    parcel = (
        "今天下午刚刚收到菜鸟驿站发来的短信，说我上周在网上买的那一整箱专业书已经到了，"
        "放在东门的快递柜子里，取件码4-2-1187，晚上八点前一定要去取"
    )
    await say(runtime, ("user", parcel))
    ANY_TEXT.seen.clear()
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = event_of("/回忆 取件码", group_id=GROUP)
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, ANY_TEXT, {"message_id": 1})
    [answer] = ANY_TEXT.seen
    [item] = [line for line in answer.splitlines() if line.startswith("· ")]
    assert item.startswith("· 2小时前 你：…") and "取件码4-2-1187" in item, item
    assert len(item) <= 60


async def test_recall_leaves_out_the_asking_message_and_the_bots_answers_to_recalls(
    app: App, runtime
):
    event = event_of("/recall 周会", group_id=GROUP)
    assert isinstance(event, MessageEvent)
    await say(runtime, ("user", "周会改到周四下午三点"))
    # As a recorder that keeps every message (or an import of the chat) would have them: an
    # earlier /recall, the bot's answer to it, and this very message.
    await say(
        runtime,
        ("user", "／回忆 周会"),
        ("assistant", f"与“周会”相关的记忆（群 {GROUP}）：\n· 3天前 你：周会改到周四下午三点"),
        ("assistant", f"在群 {GROUP} 中没有找到与“周会 时间”相关的记忆。"),
    )
    await say(runtime, ("user", "/recall 周会"), message_id=event.message_id)
    await run(
        app,
        (
            event,
            f"与“周会”相关的记忆（群 {GROUP}）：\n· 2小时前 你：周会改到周四下午三点\n"
            "加 --full 查看带上下文的完整记忆。",
        ),
    )


async def test_recall_of_a_99000_character_argument_gets_one_short_reply(app: App, runtime):
    ANY_TEXT.seen.clear()
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = event_of("/recall " + "潜水艇下潜" * 19_800, group_id=GROUP)
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, ANY_TEXT, {"message_id": 1})
    [answer] = ANY_TEXT.seen
    assert answer == "内容太长（99000 字），请控制在 500 字以内。"  # never echoed back


class _AnyText:
    """Matches any message sent, keeping its text for the test to read."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def __eq__(self, other: object) -> bool:
        # The text alone: a group answer's quote of the command is not what is said.
        if isinstance(other, Message):
            other = "".join(str(seg) for seg in other if seg.type != "reply")
        self.seen.append(str(other))
        return True


ANY_TEXT = _AnyText()


def test_recall_args_parse(plugin: Any) -> None:
    from nonebot_plugin_temporal_memory.commands.recall import parse_recall_args

    parsed = parse_recall_args("--user 5 猫 --group=7 的名字")
    assert (parsed.query, parsed.user_id, parsed.group_id, parsed.private) == (
        "猫 的名字",
        5,
        7,
        False,
    )
    assert parse_recall_args("--private 狗").private
    assert not parse_recall_args("猫--user 5").has_flags


# ----------------------------------------------------------------------------- /remember


async def test_remember_stores_a_note_without_expiry_and_does_not_chat(app: App, runtime, model):
    await run(
        app, (event_of("/记住 我的生日是五月三日", group_id=GROUP), "记住了，这条会一直保留。")
    )
    turns = await runtime.memory.parts.retriever.recent_turns(USER, GROUP, limit=5, since=EPOCH)
    assert [(t.role, t.content, t.expires_at) for t in turns] == [
        ("user", "我的生日是五月三日", None)
    ]
    assert model.prompts == []
    await run(app, (event_of("/remember"), "用法：/remember <内容>（记住）让我永久记住一条笔记。"))


# ----------------------------------------------------------------------------- every command


async def test_a_huge_argument_gets_one_short_answer_and_reaches_no_command(
    app: App, runtime, model
):
    await seed(runtime)
    huge = "花生" * 49_500  # 99,000 characters
    too_long = "内容太长（99000 字），请控制在 500 字以内。"
    for command in ("/忘记", "/回忆", "/remember", "/recall"):
        for group in (None, GROUP):
            # nonebug fails on any send not expected here: one answer, and no echo of it.
            await run(app, (event_of(f"{command} {huge}", group_id=group), too_long))
    assert await contents(runtime, USER, None) == ["我的狗叫旺财"]  # no note stored
    assert await contents(runtime, USER, GROUP) == ["我的猫叫咪咪"]
    assert model.prompts == []


async def test_an_argument_at_the_limit_is_still_the_commands(app: App, runtime):
    note = "长" * 500
    await run(app, (event_of(f"/remember {note}"), "记住了，这条会一直保留。"))
    assert await contents(runtime, USER, None) == [note]


async def test_group_command_answers_quote_the_command(app: App, runtime):
    from nonebot_plugin_temporal_memory.commands.recall import RECALL_USAGE

    answers = {
        "/remember 我的生日是五月三日": "记住了，这条会一直保留。",
        "/forget user 1": "只有超级用户可以删除其他人、整个群或全部的记忆。",
        "/回忆": RECALL_USAGE,
    }
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        for said, answer in answers.items():
            event = event_of(said, group_id=GROUP)
            ctx.receive_event(bot, event)
            quoting = MessageSegment.reply(event.message_id) + text(answer)
            ctx.should_call_send(event, quoting, {"message_id": 1})


def test_an_answer_needing_more_than_two_messages_is_cut_to_two(plugin: Any) -> None:
    from nonebot_plugin_temporal_memory.messaging import ANSWER_CUT_MARK, at_most

    pieces = ["一" * 100, "二" * 100, "三" * 100]
    kept = at_most(pieces, 2, 100)
    assert kept[0] == pieces[0] and kept[1].endswith(ANSWER_CUT_MARK)
    assert all(len(p) <= 100 for p in kept) and "三" not in "".join(kept)
    assert at_most(pieces[:2], 2, 100) == pieces[:2]


def test_a_quoted_argument_is_one_line_of_at_most_thirty_characters(plugin: Any) -> None:
    from nonebot_plugin_temporal_memory.messaging import quoted

    assert quoted("花生") == "“花生”"
    assert quoted("花\n生  酱") == "“花 生 酱”"
    assert quoted("花" * 99_000) == "“" + "花" * 30 + "…”"


async def test_recall_lists_the_lines_the_prompt_would_carry(app: App, runtime):
    """/回忆 without --full: the dialogue lines the bot's prompt carries for the same message
    (the context builder's), one a line, the best match first."""
    await say(
        runtime,
        ("user", "周五的周会改到下午三点了"),
        ("assistant", "收到，周五下午三点开周会。"),
        ("user", "今天中午吃了牛肉面"),
        ("user", "我的猫叫咪咪"),
        ("user", "周末打算去爬山"),
        ("user", "最近在看一本小说"),
        ("user", "晚上想吃火锅"),
        ("user", "明天要早起"),
    )
    prompt = await runtime.memory.parts.context_builder.build(USER, GROUP, "周会", touch=False)
    recalled = await runtime.memory.parts.retriever.recall(USER, "周会", GROUP)
    by_id = {t.id: t.content for t in recalled.turns}
    ANY_TEXT.seen.clear()
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = event_of("/回忆 周会", group_id=GROUP)
        ctx.receive_event(bot, event)
        ctx.should_call_send(event, ANY_TEXT, {"message_id": 1})
    [answer] = ANY_TEXT.seen
    listed = [line.split("：", 1)[1] for line in answer.splitlines() if line.startswith("· ")]
    assert sorted(listed) == sorted(by_id[i] for i in prompt.turn_ids), answer
    assert len(listed) > 3 and "周会" in listed[0], answer
