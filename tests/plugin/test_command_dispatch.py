"""The one command matcher (``command_dispatch``) accepts exactly what a matcher per command
accepted: every command start and alias, after an @ of the bot or its nickname, with or without
a space before the argument, addressed or not in a group; it blocks the chat and the recorder;
what is not a command at the start of the message is chat. Events pass the adapter's
reply / @ / nickname checks first, as the real adapter does before dispatching them."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from nonebot.adapters.onebot.v11 import Bot
from nonebug import App

from memory_core.models import TurnInput
from tests.plugin.events import SELF_ID, at_seg, message_payload, text_seg
from tests.plugin.test_commands import answer_to
from tests.plugin.test_matchers import adapt

EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
USER = 20002
GROUP = 30003
REMEMBERED = "记住了，这条会一直保留。"
NOTE = "我的生日是五月三日"


async def say(app: App, segments: list[dict[str, Any]], answer: str | None, **payload: Any) -> None:
    """Send one message; expect ``answer`` (``None``: the bot says nothing)."""
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        event = await adapt(bot, message_payload(segments, user_id=USER, **payload))
        ctx.receive_event(bot, event)
        if answer is not None:
            ctx.should_call_send(event, answer_to(event, answer), {"message_id": 1})


async def stored(runtime: Any, group: int | None) -> list[str]:
    turns = await runtime.memory.parts.retriever.recent_turns(USER, group, limit=50, since=EPOCH)
    return [t.content for t in turns]


@pytest.mark.parametrize(
    "said",
    [
        f"/remember {NOTE}",
        f"／记住 {NOTE}",
        f"、记住 {NOTE}",
        f"/记住{NOTE}",
        f"  /remember {NOTE}",
    ],
    ids=["slash", "full-width-slash", "enumeration-comma", "no-space", "leading-spaces"],
)
async def test_every_command_start_and_alias_reaches_the_command(app: App, runtime, model, said):
    await say(app, [text_seg(said)], REMEMBERED)
    assert await stored(runtime, None) == [NOTE]
    assert model.prompts == []  # the chat matcher never saw it


@pytest.mark.parametrize(
    "segments",
    [
        [at_seg(SELF_ID), text_seg(f" /remember {NOTE}")],
        [text_seg(f"小诗 /remember {NOTE}")],
        [text_seg(f"/remember {NOTE}")],
    ],
    ids=["after-at", "after-nickname", "unaddressed"],
)
async def test_a_group_command_is_the_command_with_or_without_addressing_the_bot(
    app: App, runtime, model, segments
):
    runtime.config = runtime.config.model_copy(update={"bot_record_unaddressed": True})
    await say(app, segments, REMEMBERED, group_id=GROUP)
    # Stored once, as the note: neither the chat matcher nor the recorder took the message.
    assert await stored(runtime, GROUP) == [NOTE]
    assert model.prompts == []


async def test_the_longest_command_wins_as_before(app: App, runtime):
    """/忘记我 is a command of its own, so "/忘记我的猫" looks for "我的猫" (not /忘记)."""
    await runtime.memory.parts.writer.add_turn(
        TurnInput(user_id=USER, group_id=None, role="user", content="x")
    )
    await say(app, [text_seg("/忘记我的猫")], "没有找到包含“我的猫”的记忆，什么也没有删。")


@pytest.mark.parametrize(
    "segments",
    [
        [text_seg("请帮我 /remember 这个")],  # not at the start
        [{"type": "face", "data": {"id": "1"}}, text_seg("/remember 这个")],  # not first
    ],
    ids=["mid-text", "after-a-face"],
)
async def test_what_is_not_a_command_at_the_start_is_chat(app: App, runtime, model, segments):
    await say(app, segments, "好的")
    assert len(model.prompts) == 1


async def test_a_word_glued_to_a_command_is_its_argument_as_with_on_command(
    app: App, runtime, model
):
    await say(app, [text_seg("/rememberance 是个词")], REMEMBERED)
    assert await stored(runtime, None) == ["ance 是个词"]
    assert model.prompts == []


async def test_a_command_from_a_group_the_bot_does_not_serve_gets_no_answer(
    app: App, runtime, model
):
    runtime.config = runtime.config.model_copy(update={"bot_group_denylist": {GROUP}})
    await say(app, [at_seg(SELF_ID), text_seg(f" /remember {NOTE}")], None, group_id=GROUP)
    assert await stored(runtime, GROUP) == []
    assert model.prompts == []


async def test_an_anonymous_group_command_gets_no_answer(app: App, runtime, model):
    async with app.test_matcher() as ctx:
        bot = ctx.create_bot(base=Bot, self_id=str(SELF_ID))
        payload = message_payload([text_seg(f"/remember {NOTE}")], user_id=USER, group_id=GROUP)
        payload["sub_type"] = "anonymous"
        payload["anonymous"] = {"id": 1, "name": "匿名", "flag": "x"}
        ctx.receive_event(bot, await adapt(bot, payload))
    assert await stored(runtime, GROUP) == []


def test_the_plugin_checks_each_message_against_one_rule_checker_per_matcher(plugin):
    """What makes an ordinary message cheap: confirmations, commands, chat, recorder, recall
    notices — five matchers, none with more than one rule checker or any permission check."""
    matchers = sorted(plugin.matcher, key=lambda m: m.priority)
    assert [m.priority for m in matchers] == [1, 5, 90, 90, 91]
    assert all(len(m.rule.checkers) <= 1 for m in matchers)
    assert all(not m.permission.checkers for m in matchers)
