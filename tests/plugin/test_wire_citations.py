"""Over the real wire: a reply that rests on a remembered message quotes it (a OneBot reply
segment to that message's id), and only then.

The chat model is a loopback stand-in that behaves as one following the system prompt's rule:
it answers and, when the memory block shows a numbered line holding what the test asks about,
names that line's number in the marker (``conversation.citation``). Short-term memory is off
(CHAT_RECENT_MINUTES=0), so what was said comes back through recall, numbered.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.plugin.events import (
    SELF_ID,
    at_seg,
    message_payload,
    next_message_id,
    recall_payload,
    text_seg,
)
from tests.plugin.wire import (
    ApiCall,
    BotProcess,
    OneBotPeer,
    StubLLM,
    chatting_bot,
    sent_text,
)

GROUP = 62001
ANSWER = "你的工位密码是8812。"
NUMBERED = re.compile(r"^#(\d+) \[", re.MULTILINE)


@dataclass
class Citing:
    """What the stand-in cites: the numbered line holding ``needle``, or ``number`` as is."""

    needle: str | None = None
    number: int | None = None

    def answer(self, messages: list[dict[str, str]]) -> str:
        number = self.number
        for line in messages[-1]["content"].splitlines() if self.needle else ():
            found = NUMBERED.match(line)
            if found and self.needle and self.needle in line:
                number = int(found.group(1))
                break
        return ANSWER + (f"\n【引用#{number}】" if number is not None else "")


@dataclass
class Wire:
    llm: StubLLM
    citing: Citing
    bot: BotProcess
    peer: OneBotPeer

    async def say(self, text: str, *, user_id: int, group_id: int | None = None) -> int:
        """``text`` said to the bot (with an @ in a group); its message id."""
        segments = [text_seg(text)]
        if group_id is not None:
            segments = [at_seg(SELF_ID), text_seg(" " + text)]
        message_id = next_message_id()
        await self.peer.send_event(
            message_payload(segments, user_id=user_id, group_id=group_id, message_id=message_id)
        )
        return message_id

    async def ask(self, text: str, *, user_id: int, group_id: int | None = None) -> ApiCall:
        """``text`` said to the bot; the bot's answer (the send call)."""
        mark = len(self.peer.calls)
        await self.say(text, user_id=user_id, group_id=group_id)
        return await self.peer.wait_reply(user_id=user_id, group_id=group_id, after=mark)

    async def tell_secret(self, user_id: int, group_id: int | None = None) -> int:
        """The person says their secret (nothing cited yet); its message id."""
        self.citing.needle = self.citing.number = None
        mark = len(self.peer.calls)
        message_id = await self.say("我的工位密码是8812", user_id=user_id, group_id=group_id)
        await self.peer.wait_reply(user_id=user_id, group_id=group_id, after=mark)
        self.citing.needle = "我的工位密码是8812"  # the person's line, not the bot's answers
        return message_id

    async def prompt_arrives(self, calls: int) -> None:
        for _ in range(600):  # bounded: until the model is asked
            if len(self.llm.calls) > calls:
                return
            await asyncio.sleep(0.1)
        raise AssertionError("the model was never asked")

    async def log_says(self, text: str) -> None:
        for _ in range(600):  # bounded: until the bot logs it
            if text in self.bot.log_text():
                return
            await asyncio.sleep(0.1)
        raise AssertionError(f"the bot never logged {text!r}")


def quoted_id(call: ApiCall) -> str | None:
    """The id the send's reply segment points at; ``None`` when it quotes nothing."""
    message: Any = call.params.get("message")
    assert isinstance(message, list), message
    replies = [seg["data"]["id"] for seg in message if seg.get("type") == "reply"]
    assert len(replies) <= 1, message  # one quote at most
    return str(replies[0]) if replies else None


@pytest.fixture(scope="module")
async def wire() -> AsyncIterator[Wire]:
    citing = Citing()
    env = {
        "CHAT_RECENT_MINUTES": "0",  # what was said comes back as recalled, numbered memory
        "CHAT_TOOLS": "off",
        "EVALUATOR_ENABLED": "false",  # every call the stand-in gets is a chat reply
        "EXTRACTION_ENABLED": "false",
    }
    async with chatting_bot(StubLLM(reply=citing.answer).start(), extra_env=env) as running:
        yield Wire(llm=running.llm, citing=citing, bot=running.bot, peer=running.peer)
    # The marker never reached anyone, whatever the model wrote.
    sends = [sent_text(c) for c in running.peer.sends()]
    assert not [text for text in sends if "引用#" in text]


async def test_a_reply_resting_on_a_remembered_message_quotes_that_message(wire: Wire):
    user = 20081
    secret_id = await wire.tell_secret(user)
    call = await wire.ask("我的工位密码是多少", user_id=user)
    assert quoted_id(call) == str(secret_id)
    assert sent_text(call) == ANSWER
    # The rule is asked for in the system prompt, the numbers are in the memory block only.
    prompt = wire.llm.last_prompt_for("我的工位密码是多少")
    assert "【引用#编号】" in prompt[0]["content"]
    assert NUMBERED.search(prompt[-1]["content"]) and not NUMBERED.search(prompt[0]["content"])


async def test_nothing_is_quoted_when_the_model_cites_nothing(wire: Wire):
    user = 20082
    await wire.tell_secret(user)
    wire.citing.needle = None
    call = await wire.ask("我的工位密码是多少", user_id=user)
    assert quoted_id(call) is None and sent_text(call) == ANSWER


async def test_a_number_the_prompt_never_showed_quotes_nothing_and_its_marker_goes(wire: Wire):
    user = 20083
    await wire.tell_secret(user)
    wire.citing.needle, wire.citing.number = None, 97
    call = await wire.ask("我的工位密码是多少", user_id=user)
    assert quoted_id(call) is None and sent_text(call) == ANSWER


async def test_a_message_recalled_while_the_model_thinks_is_not_quoted(wire: Wire):
    user = 20084
    secret_id = await wire.tell_secret(user)
    calls = len(wire.llm.calls)
    wire.llm.release.clear()
    wire.llm.held = True
    try:
        mark = len(wire.peer.calls)
        await wire.say("我的工位密码是多少", user_id=user)
        await wire.prompt_arrives(calls)  # the prompt shows the secret, numbered
        assert "我的工位密码是8812" in wire.llm.calls[-1].messages[-1]["content"]
        await wire.peer.send_event(recall_payload(secret_id, user_id=user))
        await wire.log_says(f"message {secret_id} is being recalled")
    finally:
        wire.llm.held = False
        wire.llm.release.set()
    call = await wire.peer.wait_reply(user_id=user, after=mark)
    assert quoted_id(call) is None and sent_text(call) == ANSWER
    await wire.log_says(f"recalled message {secret_id}: forgotten")


async def test_a_memory_forgotten_with_forget_me_while_the_model_thinks_is_not_quoted(
    wire: Wire,
):
    user = 20085
    await wire.tell_secret(user)
    calls = len(wire.llm.calls)
    wire.llm.release.clear()
    wire.llm.held = True
    try:
        mark = len(wire.peer.calls)
        await wire.say("我的工位密码是多少", user_id=user)
        await wire.prompt_arrives(calls)
        question = await wire.ask("/忘记我", user_id=user)
        assert sent_text(question).startswith("确定要删除你在所有会话"), sent_text(question)
        receipt = await wire.ask("确认", user_id=user)
        assert sent_text(receipt).startswith("已删除你在所有会话中的记忆"), sent_text(receipt)
    finally:
        wire.llm.held = False
        wire.llm.release.set()
    call = await wire.peer.wait_for(
        lambda c: (
            c.action in {"send_msg", "send_private_msg"}
            and sent_text(c) == ANSWER
            and c.params.get("user_id") == user
        ),
        after=mark,
    )
    assert quoted_id(call) is None


async def test_a_memory_forgotten_with_forget_while_the_model_thinks_is_not_quoted(wire: Wire):
    user = 20087
    await wire.tell_secret(user)
    calls = len(wire.llm.calls)
    wire.llm.release.clear()
    wire.llm.held = True
    try:
        mark = len(wire.peer.calls)
        await wire.say("我的工位密码是多少", user_id=user)
        await wire.prompt_arrives(calls)
        assert "我的工位密码是8812" in wire.llm.calls[-1].messages[-1]["content"]
        question = await wire.ask("/忘记 工位密码", user_id=user)
        assert sent_text(question).startswith("确定要删除"), sent_text(question)
        # The first 确认 takes the question; its delete waits for the reply under way. Once a
        # second one hears there is nothing left to confirm, the first has taken it.
        await wire.say("确认", user_id=user)
        lone = await wire.ask("确认", user_id=user)
        assert sent_text(lone) == "现在没有待确认的删除。"
    finally:
        wire.llm.held = False
        wire.llm.release.set()
    call = await wire.peer.wait_for(
        lambda c: (
            c.action in {"send_msg", "send_private_msg"}
            and sent_text(c) == ANSWER
            and c.params.get("user_id") == user
        ),
        after=mark,
    )
    assert quoted_id(call) is None
    receipt = await wire.peer.wait_for(
        lambda c: c.params.get("user_id") == user and sent_text(c).startswith("已删除"),
        after=mark,
    )
    assert "对话" in sent_text(receipt)


async def test_in_a_group_by_default_nothing_is_numbered_and_the_reply_quotes_the_asker(
    wire: Wire,
):
    user = 20086
    secret_id = await wire.tell_secret(user, group_id=GROUP)
    wire.citing.number = 1  # a model citing anyway: its marker goes, nothing of it is quoted
    mark = len(wire.peer.calls)
    question_id = await wire.say("我的工位密码是多少", user_id=user, group_id=GROUP)
    call = await wire.peer.wait_reply(user_id=user, group_id=GROUP, after=mark)
    assert quoted_id(call) == str(question_id) != str(secret_id)  # BOT_GROUP_REPLY_QUOTE
    assert sent_text(call) == ANSWER
    prompt = wire.llm.last_prompt_for("我的工位密码是多少")
    assert "8812" in prompt[-1]["content"]  # recalled, but not numbered, and no rule asked
    assert not NUMBERED.search(prompt[-1]["content"])
    assert "【引用#编号】" not in prompt[0]["content"]
