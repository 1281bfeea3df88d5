"""Over the real wire, in a group with several members: only what is said to the bot answers
its questions, a lone 确认 never reaches the chat model (a loopback stand-in that counts its
calls), and answers name the group by its name."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from tests.plugin.events import SELF_ID, at_seg, message_payload, text_seg
from tests.plugin.wire import ApiCall, BotProcess, OneBotPeer, StubLLM, chatting_bot, sent_text

ASKER, XIAOHONG, GROUP = 20061, 20062, 61001
SENDS = {"send_msg", "send_private_msg", "send_group_msg"}


@dataclass
class Wire:
    llm: StubLLM
    bot: BotProcess
    peer: OneBotPeer

    async def send(self, text: str, *, user_id: int, group_id: int | None, to_bot: bool) -> int:
        """Send ``text`` (with an @ of the bot first when ``to_bot`` in a group); the index of
        the first API call after it."""
        mark = len(self.peer.calls)
        segments = [text_seg(text)]
        if to_bot and group_id is not None:
            segments = [at_seg(SELF_ID), text_seg(" " + text)]
        await self.peer.send_event(message_payload(segments, user_id=user_id, group_id=group_id))
        return mark

    async def ask(self, text: str, *, user_id: int = ASKER, group_id: int | None = GROUP) -> str:
        """``text`` said to the bot; its answer in that chat."""
        mark = await self.send(text, user_id=user_id, group_id=group_id, to_bot=True)
        call = await self.peer.wait_reply(user_id=user_id, group_id=group_id, after=mark)
        return sent_text(call)

    def sends_since(self, mark: int) -> list[ApiCall]:
        return [c for c in self.peer.calls[mark:] if c.action in SENDS]


@pytest.fixture(scope="module")
async def wire() -> AsyncIterator[Wire]:
    # Unaddressed group messages are recorded: a 好 to someone else is stored, not answered.
    # No evaluator: every call the stand-in counts is a chat reply.
    env = {"BOT_RECORD_UNADDRESSED": "true", "EVALUATOR_ENABLED": "false"}
    async with chatting_bot(StubLLM(reply="好的，知道了。").start(), extra_env=env) as running:
        running.peer.group_names[GROUP] = "设计组"
        yield Wire(llm=running.llm, bot=running.bot, peer=running.peer)


async def test_a_lone_confirm_with_nothing_asked_is_told_so_and_reaches_no_model(wire: Wire):
    calls = len(wire.llm.calls)
    assert await wire.ask("确认", group_id=None) == "现在没有待确认的删除。"
    assert await wire.ask("确定！") == "现在没有待确认的删除。"
    assert len(wire.llm.calls) == calls


async def test_an_unaddressed_yes_in_a_group_gets_no_reply_and_the_question_stays_open(
    wire: Wire,
):
    assert await wire.ask("设计稿周五交给阿强") == "好的，知道了。"
    asked = await wire.ask("/忘记 设计稿")
    assert asked.startswith("确定要删除你在本群包含“设计稿”的内容吗？"), asked
    calls = len(wire.llm.calls)
    # 小红 and the asker answer each other, not the bot: no word from it, nothing deleted.
    mark = await wire.send("好", user_id=XIAOHONG, group_id=GROUP, to_bot=False)
    await wire.send("好", user_id=ASKER, group_id=GROUP, to_bot=False)
    hint_mark = await wire.send("确认", user_id=ASKER, group_id=GROUP, to_bot=False)
    hint = await wire.peer.wait_reply(user_id=ASKER, group_id=GROUP, after=hint_mark)
    assert sent_text(hint) == "要删除的话请 @我 回复“确认”（或引用我的提问回复）。"
    assert [sent_text(c) for c in wire.sends_since(mark)] == [sent_text(hint)]
    # The question is still open: said to the bot, 确认 deletes.
    receipt = await wire.ask("确认")
    assert receipt.startswith("已删除你在本群选中的记忆：对话 "), receipt
    assert len(wire.llm.calls) == calls
    found = await wire.ask("/回忆 设计稿")
    assert found == "在群“设计组”中没有找到与“设计稿”相关的记忆。", found
