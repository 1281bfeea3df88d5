"""Over the real wire, with parts missing: no reachable database, or no chat model at all."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from memory_core.conversation.engine import NOT_CONFIGURED_NOTICE, SLOW_NOTICE
from tests.pg_processes import kill_postmaster, postgres_processes
from tests.plugin.events import SUPERUSER_ID, message_payload, text_seg
from tests.plugin.wire import BotProcess, OneBotPeer, StubLLM, sent_text, start_bot, stop_bot


@pytest.fixture
async def launch() -> AsyncIterator[Callable[..., Any]]:
    """Start a bot (and connect a peer) with the given options; everything stopped afterwards."""
    started: list[tuple[BotProcess, OneBotPeer]] = []

    async def run(**kwargs: Any) -> tuple[BotProcess, OneBotPeer]:
        bot = await start_bot(**kwargs)
        peer = await OneBotPeer.connect(bot.ws_url, bot.token)
        started.append((bot, peer))
        return bot, peer

    yield run
    for bot, peer in started:
        await peer.close()
        await stop_bot(bot)
        shutil.rmtree(bot.data_dir, ignore_errors=True)


async def say(peer: OneBotPeer, text: str, user_id: int) -> str:
    mark = len(peer.calls)
    await peer.send_event(message_payload([text_seg(text)], user_id=user_id))
    return sent_text(await peer.wait_reply(user_id=user_id, after=mark))


async def test_database_unreachable_bot_starts_answers_without_memory_and_spools(launch):
    llm = StubLLM(reply="没问题。").start()
    try:
        bot, peer = await launch(
            llm_url=llm.base_url,
            extra_env={"MEMORY_DSN": "postgresql://nobody@127.0.0.1:9/none?connect_timeout=2"},
        )
        assert await say(peer, "数据库不在也要回我", user_id=20020) == "没问题。"
        prompt = llm.last_prompt_for("数据库不在也要回我")
        assert "当前时间：" in prompt[-1]["content"]
        assert all("--- 相关记忆 ---" not in m["content"] for m in prompt)
        # The reply is stored (here: spooled) right after it was sent.
        spool = ""
        for _ in range(600):  # 60 s at most, not a timing check
            spool = (bot.data_dir / "spool.jsonl").read_text(encoding="utf-8")
            if "没问题。" in spool:
                break
            await asyncio.sleep(0.1)
        assert "数据库不在也要回我" in spool and "没问题。" in spool
        # A lone surrogate and a NUL, escaped in the event's JSON as a real client sends them:
        # answered, and spooled cleaned (writing it raw to the spool used to kill the handler).
        mark = len(peer.calls)
        odd = message_payload([text_seg("半个\ud83d表情\x00")], user_id=20020)
        await peer.ws.send(json.dumps(odd))
        assert sent_text(await peer.wait_reply(user_id=20020, after=mark)) == "没问题。"
        spool = (bot.data_dir / "spool.jsonl").read_text(encoding="utf-8")
        assert "半个\ufffd表情" in spool
        # /memstat still shows what it can: the title, the outage, the connection.
        memstat = (await say(peer, "/memstat", user_id=SUPERUSER_ID)).split("\n")
        assert memstat[0].startswith("📊 记忆统计（截至 ")
        assert "记忆数据库暂时连不上，请稍后再试。" in memstat
        assert "数据库：连不上（外部 PostgreSQL）" in memstat
        assert "memory database unreachable at start-up" in bot.log_text()
    finally:
        llm.stop()


async def test_without_chat_model_bot_records_answers_commands_and_notices_once_per_interval(
    launch,
):
    # An interval no run comes near: "within the interval" holds however slow the machine.
    # (The interval itself is proved with an injected clock in tests/core/conversation; that
    # the chat hears the notice again once it has passed, by the next test.)
    bot, peer = await launch(llm_url=None, extra_env={"CHAT_NOTICE_INTERVAL": "3600"})
    user = 20021
    assert await say(peer, "你好，我叫小红", user_id=user) == NOT_CONFIGURED_NOTICE
    # Within the notice interval the next message gets no notice, but it is still recorded;
    # commands still answer. (/recall does not wait for the message being stored: poll.)
    mark = len(peer.calls)
    await peer.send_event(message_payload([text_seg("我喜欢吃草莓")], user_id=user))
    for _ in range(300):  # at least 60 s, not a timing check
        answer = await say(peer, "/recall 草莓", user_id=user)
        if "我喜欢吃草莓" in answer:
            break
        await asyncio.sleep(0.2)
    assert "我喜欢吃草莓" in answer
    # The first message, answered with the notice, was recorded too (/recall lists only what
    # is about its query: it takes a query of its own).
    assert "你好，我叫小红" in await say(peer, "/recall 小红", user_id=user)
    after = [sent_text(c) for c in peer.sends() if peer.calls.index(c) >= mark]
    assert NOT_CONFIGURED_NOTICE not in after
    log = bot.log_text()
    assert log.count("no chat model configured") == 1


async def test_once_the_notice_interval_has_passed_the_chat_hears_it_again(launch):
    # No ten minutes of silence. The bot takes its notice's time before sending it, so once
    # this side's clock (the same monotonic clock) is an interval past the notice's arrival,
    # the bot's is too: a slow machine only makes more time pass.
    interval = 1.0
    _, peer = await launch(llm_url=None, extra_env={"CHAT_NOTICE_INTERVAL": str(interval)})
    user = 20025
    assert await say(peer, "你好，我叫小红", user_id=user) == NOT_CONFIGURED_NOTICE
    noticed_at = time.monotonic()
    await asyncio.sleep(max(0.0, noticed_at + interval + 0.2 - time.monotonic()))
    assert await say(peer, "还是不能聊吗", user_id=user) == NOT_CONFIGURED_NOTICE


async def test_a_slow_model_makes_the_bot_say_wait_before_its_answer(launch):
    # The model answers only once the wait message is in: its timer cannot lose a race.
    llm = StubLLM(reply="想好了。", held=True).start()
    try:
        _, peer = await launch(llm_url=llm.base_url, extra_env={"CHAT_SLOW_NOTICE_AFTER": "0.3"})
        user = 20023
        mark = len(peer.calls)
        await peer.send_event(message_payload([text_seg("帮我想个难题")], user_id=user))
        first = await peer.wait_reply(user_id=user, after=mark)
        assert sent_text(first) == SLOW_NOTICE
        llm.release.set()
        answer = await peer.wait_reply(user_id=user, after=peer.calls.index(first) + 1)
        assert sent_text(answer) == "想好了。"
    finally:
        llm.stop()


async def test_embedded_database_killed_under_the_bot_comes_back_with_the_message_said_meanwhile(
    launch,
):
    # The bot makes its own cluster: on a copied one its first maintenance round was still
    # running at the kill, failed, and rested its 30 s before restarting the server.
    bot, peer = await launch(llm_url=None, own_cluster=True)
    cluster = bot.data_dir / "pg"
    user = 20022
    await kill_postmaster(cluster)  # kill -9, as the OOM killer would
    await peer.send_event(message_payload([text_seg("数据库挂掉的时候我说了这句")], user_id=user))
    answer = ""
    for _ in range(120):  # bounded wait for the restart and the spool flush, not a timing check
        answer = await say(peer, "/recall 挂掉的时候", user_id=user)
        if "数据库挂掉的时候我说了这句" in answer:
            break
        await asyncio.sleep(0.5)
    assert "数据库挂掉的时候我说了这句" in answer
    assert "is back" in bot.log_text()
    await stop_bot(bot)  # SIGTERM: a clean stop
    assert postgres_processes(cluster) == []


async def test_forget_me_with_the_database_down_drops_my_spooled_turns_and_says_the_rest_waits(
    launch,
):
    llm = StubLLM(reply="好的。").start()
    try:
        bot, peer = await launch(
            llm_url=llm.base_url,
            extra_env={"MEMORY_DSN": "postgresql://nobody@127.0.0.1:9/none?connect_timeout=2"},
        )
        me, other = 20023, 20024
        await say(peer, "我的银行卡密码是778899", user_id=me)
        await say(peer, "别人的话留着", user_id=other)
        spool = bot.data_dir / "spool.jsonl"
        for _ in range(600):  # the reply is stored right after it is sent (60 s at most)
            if spool.read_text(encoding="utf-8").count("好的。") == 2:
                break
            await asyncio.sleep(0.1)
        question = await say(peer, "/忘记我", user_id=me)
        assert question.startswith("确定要删除你在所有会话")
        answer = await say(peer, "确认", user_id=me)
        assert answer == (
            "记忆数据库暂时连不上：已删除暂存的对话 2 条；"
            "你在所有会话中已保存的记忆会在数据库恢复后自动删除。"
        )
        left = spool.read_text(encoding="utf-8")
        assert "778899" not in left and "别人的话留着" in left
        assert '"forget": {"user_id": 20023' in left  # done once the database is back
    finally:
        llm.stop()
