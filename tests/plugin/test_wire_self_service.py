"""Over the real wire: a member's memories asked for in a group never reach the group.

The bot's database is filled the way an operator would: ``python -m memory_core import`` of a
JSON-lines file, run beside the running bot.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.plugin.events import (
    SELF_ID,
    at_seg,
    message_payload,
    recall_payload,
    reply_seg,
    text_seg,
)
from tests.plugin.wire import (
    REPO,
    ApiCall,
    BotProcess,
    ChattingBot,
    OneBotPeer,
    StubLLM,
    chatting_bot,
    sent_text,
)

MEMBER, GROUP = 20031, 88001
SECRET = "用户的银行卡密码是778899"
SENDS = {"send_msg", "send_private_msg", "send_group_msg"}


@dataclass
class Wire:
    bot: BotProcess
    peer: OneBotPeer

    async def say_in_group(self, text: str) -> tuple[int, str]:
        """Send ``text`` to the group as MEMBER; the index of the first call after it and the
        bot's answer in the group."""
        mark = len(self.peer.calls)
        await self.peer.send_event(
            message_payload([text_seg(text)], user_id=MEMBER, group_id=GROUP)
        )
        call = await self.peer.wait_reply(user_id=MEMBER, group_id=GROUP, after=mark)
        return mark, sent_text(call)

    def group_texts(self) -> list[str]:
        return [
            sent_text(c)
            for c in self.peer.calls
            if c.action in SENDS and c.params.get("group_id") == GROUP
        ]


async def import_memories(data_dir: Path, lines: list[dict[str, object]]) -> str:
    path = data_dir / "memories.jsonl"
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines), "utf-8")
    env = {**os.environ, "MEMORY_DSN": "", "PYTHONPATH": str(REPO)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memory_core", "--data-dir", str(data_dir), "import", str(path),
        cwd=data_dir, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 300)
    assert process.returncode == 0, err.decode()
    return out.decode()


def fact(content: str, group_id: int | None) -> dict[str, object]:
    return {
        "type": "memory",
        "kind": "facts",
        "user_id": MEMBER,
        "group_id": group_id,
        "content": content,
        "category": "personal_info",
        "first_seen": "2026-11-20T12:00:00+08:00",
    }


@pytest.fixture(scope="module")
async def running() -> AsyncIterator[ChattingBot[StubLLM]]:
    """One bot for the module: the group's tests (``wire``, MEMBER in GROUP) and the private
    chat's (``chat``, TALKER) touch each other's people and chats nowhere."""
    async with chatting_bot(StubLLM().start()) as running:
        imported = await import_memories(
            running.bot.data_dir, [fact(SECRET, GROUP), fact("用户喜欢猫", None)]
        )
        assert "distilled memories: stored 2 new" in imported
        yield running
    # Neither what members said nor the memory they forgot is in the log.
    assert "778899" not in running.log


@pytest.fixture(scope="module")
def wire(running: ChattingBot[StubLLM]) -> Wire:
    return Wire(bot=running.bot, peer=running.peer)


async def test_mymem_in_a_group_goes_to_the_member_privately_and_the_group_gets_a_hint(wire):
    mark, in_group = await wire.say_in_group("/我的记忆")
    assert in_group == "你在本群的记忆已私聊发给你（不在群里公开）。"
    private = await wire.peer.wait_reply(user_id=MEMBER, after=mark)
    listing = sent_text(private)
    assert listing.startswith("在群 88001 中我记得关于你的 1 条")
    # This group's memories only, shown to their person as 你….
    assert "你的银行卡密码是778899" in listing and "猫" not in listing
    assert not any("778899" in text for text in wire.group_texts())


async def test_forget_by_number_or_word_in_a_group_names_no_memory_there(wire):
    await wire.say_in_group("/我的记忆")
    _, question = await wire.say_in_group("/忘记 1")
    assert question.startswith("确定要删除你在本群的第 1 条记忆吗？")
    _, cancelled = await wire.say_in_group("小诗 取消")
    assert cancelled == "已取消，记忆保持不变。"
    _, question = await wire.say_in_group("/忘记 银行卡")
    assert question.startswith("确定要删除你在本群包含“银行卡”的 1 条记忆吗？")
    _, done = await wire.say_in_group("小诗 确认")  # in a group, said to the bot
    assert done == "已删除你在本群选中的记忆：事实 1 条。"
    assert not any("778899" in text for text in wire.group_texts())
    mark, _ = await wire.say_in_group("/我的记忆")
    listing = sent_text(await wire.peer.wait_reply(user_id=MEMBER, after=mark))
    assert "银行卡" not in listing


# ----------------------------------------------------------------------------- confirmations

ASKER, NEIGHBOUR, TEAM = 20041, 20042, 88002


async def say_in_team(
    wire: Wire, segments: list[dict[str, object]], *, user_id: int = ASKER
) -> tuple[int, ApiCall]:
    """Send ``segments`` to TEAM; the id of the message sent and the bot's answer there."""
    payload = message_payload(segments, user_id=user_id, group_id=TEAM)
    mark = len(wire.peer.calls)
    await wire.peer.send_event(payload)
    call = await wire.peer.wait_reply(user_id=user_id, group_id=TEAM, after=mark)
    return int(str(payload["message_id"])), call


def quotes(call: ApiCall, message_id: int) -> bool:
    first = call.params["message"][0]
    return bool(first == {"type": "reply", "data": {"id": str(message_id)}})


async def test_a_bare_yes_in_a_group_gets_no_word_and_a_reply_to_the_question_confirms(wire):
    await say_in_team(wire, [at_seg(SELF_ID), text_seg(" 我家的猫叫年糕")])
    asked_id, question = await say_in_team(wire, [text_seg("/忘记")])
    assert sent_text(question).startswith("将删除你在本群的记忆：对话 2 条。")
    assert quotes(question, asked_id)  # the group sees whose question it is
    # Someone else talks to the asker, who answers them: no word from the bot, and the
    # question stays open.
    mark = len(wire.peer.calls)
    await wire.peer.send_event(
        message_payload([text_seg("晚上一起吃饭吗？")], user_id=NEIGHBOUR, group_id=TEAM)
    )
    await wire.peer.send_event(message_payload([text_seg("好")], user_id=ASKER, group_id=TEAM))
    # A reply to the bot's question is said to the bot (the adapter reads the quoted message).
    question_id = question.params["_message_id"]
    _, done = await say_in_team(wire, [reply_seg(question_id), text_seg("确认")])
    assert sent_text(done) == "已删除你在本群的记忆：对话 2 条。"
    assert [c for c in wire.peer.calls[mark:] if c.action in SENDS] == [done]


async def test_a_huge_argument_in_a_group_gets_one_short_quoted_answer(wire):
    for command in ("/忘记", "/回忆", "/remember"):
        mark = len(wire.peer.calls)
        said_id, answer = await say_in_team(wire, [text_seg(f"{command} {'花' * 99_000}")])
        assert sent_text(answer) == "内容太长（99000 字），请控制在 500 字以内。"
        assert quotes(answer, said_id)
        _, after = await say_in_team(wire, [text_seg("/remember 短的笔记")])
        sends = [c for c in wire.peer.calls[mark:] if c.action in SENDS]
        assert sends == [answer, after], command  # nothing else was sent in between


# ----------------------------------------------------------------------------- what a delete takes

TALKER = 20041  # a private chat with the bot


async def export_lines(data_dir: Path) -> list[str]:
    """``python -m memory_core export`` of TALKER's private chat, run beside the bot."""
    env = {**os.environ, "MEMORY_DSN": "", "PYTHONPATH": str(REPO)}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memory_core", "--data-dir", str(data_dir), "export",
        "--session", str(TALKER), cwd=data_dir, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 300)
    assert process.returncode == 0, err.decode()
    return out.decode().splitlines()


@dataclass
class Chat:
    bot: BotProcess
    peer: OneBotPeer
    llm: StubLLM

    async def say(self, text: str, *, answer: str | None = None) -> tuple[dict[str, object], str]:
        """Say ``text`` privately as TALKER (the model answering ``answer``); the event sent
        and the bot's reply."""
        if answer is not None:
            self.llm.reply = answer
        mark = len(self.peer.calls)
        payload = message_payload([text_seg(text)], user_id=TALKER)
        await self.peer.send_event(payload)
        call = await self.peer.wait_reply(user_id=TALKER, after=mark)
        return payload, sent_text(call)


@pytest.fixture(scope="module")
def chat(running: ChattingBot[StubLLM]) -> Chat:
    return Chat(bot=running.bot, peer=running.peer, llm=running.llm)


async def test_forget_a_word_and_confirm_leaves_no_turn_or_echo_holding_it(chat):
    await chat.say("我对花生过敏，记住哦", answer="好的，你对花生过敏，我记住了。")
    await chat.say("我住在杭州", answer="杭州很美。")
    await chat.say("推荐点零食", answer="你对花生过敏，推荐海苔吧。")
    assert sum("花生" in line for line in await export_lines(chat.bot.data_dir)) == 3

    _, question = await chat.say("/忘记 花生")
    assert question.startswith("确定要删除这些内容吗？\n这些对话：\n· 你：我对花生过敏，记住哦\n")
    assert "· 小诗：你对花生过敏，推荐海苔吧。\n一共：对话 1 条、机器人回复 2 条。" in question
    _, done = await chat.say("确认")
    assert done == "已删除包含“花生”的记忆：对话 1 条、机器人回复 2 条。"

    lines = await export_lines(chat.bot.data_dir)
    assert not [line for line in lines if "花生" in line]
    assert any("我住在杭州" in line for line in lines)
    await chat.say("还有别的零食吗", answer="有的。")
    assert "花生" not in "\n".join(m["content"] for m in chat.llm.calls[-1].messages)


async def test_a_recall_takes_the_bots_later_reply_repeating_the_message(chat):
    secret, _ = await chat.say("我的银行卡密码是778899", answer="收到。")
    await chat.say("再确认一下", answer="你的银行卡密码是778899，我记着呢。")
    await chat.say("今天天气不错", answer="适合散步。")
    assert sum("778899" in line for line in await export_lines(chat.bot.data_dir)) == 2

    await chat.peer.send_event(recall_payload(int(str(secret["message_id"])), user_id=TALKER))
    for _ in range(300):  # at least 60 s, not a timing check
        lines = await export_lines(chat.bot.data_dir)
        if not any("778899" in line for line in lines):
            break
        await asyncio.sleep(0.2)
    assert not any("778899" in line for line in lines)
    assert any("再确认一下" in line for line in lines) and any("适合散步" in line for line in lines)
