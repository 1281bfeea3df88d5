"""The agents' operations on a real PostgreSQL, in one process: forgetting named facts takes
those and their turns only, bad arguments are refused with why (through the SDK's in-process
client), and with the database away a note is spooled (its flush still honouring an opt-out)
while a recall is refused."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import asyncpg
import pytest
from mcp import Client
from mcp.types import TextContent

from memory_core.agents.mcp_server import build_server
from memory_core.agents.memory import AgentMemory, AgentRefusal
from memory_core.conversation.engine import ConversationEngine
from memory_core.distill.memory import ExtractedMemory
from memory_core.errors import MemoryCoreError
from memory_core.models import TurnInput
from memory_core.personal import opt_out, switch_group_memory
from memory_core.service import TemporalMemory
from memory_core.storage.opt_outs import SQL_OPT_OUT
from tests.core.storage.test_database_outage import open_via_proxy
from tests.core.storage.test_database_outage import proxy as proxy  # the fixture

T0 = datetime.now(timezone.utc) - timedelta(days=1)
ME, OTHER, GROUP = 11, 12, 900


def agent_of(memory: TemporalMemory) -> AgentMemory:
    engine = ConversationEngine(parts=memory.parts, chat_model=None)
    return AgentMemory(memory.parts, engine, "test")


async def said(memory: TemporalMemory, user_id: int, text: str, minute: int) -> int:
    turn = TurnInput(
        user_id=user_id, role="user", content=text, created_at=T0 + timedelta(minutes=minute)
    )
    stored = await memory.parts.writer.add_turn(turn)
    assert stored.turn is not None
    return stored.turn.id


async def test_forget_with_ids_takes_those_facts_and_their_turns_and_nothing_else(memory_factory):
    memory = await memory_factory()
    peanut = await said(memory, ME, "我对花生过敏", 0)
    city = await said(memory, ME, "我住在杭州", 1)
    await said(memory, OTHER, "我也对花生过敏", 2)
    for text, source in [("用户对花生过敏", peanut), ("用户住在杭州", city)]:
        await memory.parts.keeper.save(
            [ExtractedMemory("facts", text, source_turn_ids=(source,))],
            ME,
            source_turn_ids=[source],
            stated_at=T0,
        )
    await memory.parts.keeper.save(
        [ExtractedMemory("facts", "用户对花生过敏")], OTHER, stated_at=T0
    )
    agent = agent_of(memory)

    found = await agent.recall(ME, "花生")
    [fact] = [f for f in found["facts"] if f["content"] == "用户对花生过敏"]
    assert (await agent.forget(ME, ids=[]))["facts"] == 0  # an empty list names nothing
    gone = await agent.forget(ME, ids=[fact["id"]])
    assert (gone["facts"], gone["dialogues"]) == (1, 1)

    assert (await agent.recall(ME, "花生"))["turns"] == []
    assert [t["id"] for t in (await agent.recall(ME, "杭州"))["turns"]] == [city]
    other = await agent.recall(OTHER, "花生")
    assert [f["content"] for f in other["facts"]] == ["用户对花生过敏"]
    assert len(other["turns"]) == 1
    # Another person's fact id, named by ME, is not ME's to delete.
    [others_fact] = other["facts"]
    assert (await agent.forget(ME, ids=[others_fact["id"]]))["facts"] == 0
    assert len((await agent.recall(OTHER, "花生"))["facts"]) == 1


async def test_bad_arguments_are_tool_errors_saying_why(memory_factory):
    memory = await memory_factory()
    async with Client(build_server(lambda: agent_of(memory), readonly=False)) as client:
        for tool, arguments, why in [
            ("recall", {"user_id": ME, "query": "猫", "top_n": 0}, "top_n must be between"),
            ("recall", {"user_id": ME, "query": "猫", "top_n": 51}, "top_n must be between"),
            ("recall", {"user_id": -1, "query": "猫"}, "positive QQ numbers"),
            ("remember", {"user_id": ME, "text": " \n "}, "text is empty"),
            ("remember", {"user_id": ME, "text": "记" * 501}, "501 characters; at most 500"),
            ("recall", {"user_id": ME, "query": "猫" * 501}, "at most 500"),
            ("forget", {"user_id": ME, "ids": list(range(201))}, "at most 200 ids"),
            ("recall", {"user_id": "not a number", "query": "猫"}, "user_id"),
        ]:
            result = await client.call_tool(tool, arguments)
            text = "".join(c.text for c in result.content if isinstance(c, TextContent))
            assert result.is_error and why in text, (tool, arguments, text)


async def test_with_the_database_away_a_note_is_spooled_and_a_recall_refused(
    proxy,
    fresh_dsn,
    tmp_data_dir,
    hashing_embedder,
):
    memory = await open_via_proxy(proxy, fresh_dsn, tmp_data_dir, hashing_embedder)
    agent = agent_of(memory)
    try:
        conn = await asyncpg.connect(fresh_dsn)
        try:
            await conn.execute(SQL_OPT_OUT, OTHER, "private")
        finally:
            await conn.close()
        await proxy.stop()
        kept = await agent.remember(ME, "数据库断开时记下的笔记")
        assert kept == {
            "stored": False, "id": None, "spooled": True, "duplicate": False, "name": None
        }  # fmt: skip
        # The opt-out cannot be read now: the note waits, and the flush refuses it.
        assert (await agent.remember(OTHER, "不要记我的笔记"))["spooled"]
        with pytest.raises(MemoryCoreError):
            await agent.recall(ME, "笔记")
        await proxy.start()
        await memory.parts.forgetting.flush_spool()
        assert [t["content"] for t in (await agent.recall(ME, "笔记"))["turns"]] == [
            "数据库断开时记下的笔记"
        ]
        with pytest.raises(AgentRefusal, match="asked not to be remembered"):
            await agent.recall(OTHER, "笔记")
        conn = await asyncpg.connect(fresh_dsn)
        try:
            assert (
                await conn.fetchval("SELECT count(*) FROM dialogues WHERE user_id = $1", OTHER) == 0
            )
            actions = await conn.fetch("SELECT action FROM memory_audit_log ORDER BY id")
        finally:
            await conn.close()
        assert [a["action"] for a in actions] == ["recall"]  # the notes' entries were lost
    finally:
        await memory.aclose()


async def test_a_group_switched_off_or_an_opt_out_everywhere_refuses_there_too(memory_factory):
    memory = await memory_factory()
    agent = agent_of(memory)
    await agent.remember(ME, "群里的笔记", GROUP)
    await agent.remember(ME, "私聊的笔记")
    await switch_group_memory(memory.parts.database, GROUP, on=False)  # what /群记忆 关 writes
    for user_id in (ME, OTHER):
        with pytest.raises(AgentRefusal, match="asked not to be remembered"):
            await agent.recall(user_id, "笔记", GROUP)
    assert [t["content"] for t in (await agent.recall(ME, "笔记"))["turns"]] == ["私聊的笔记"]
    await opt_out(memory.parts.database, ME, None, everywhere=True)  # /不记我 全部
    with pytest.raises(AgentRefusal, match="asked not to be remembered"):
        await agent.remember(ME, "再记一条")
    assert (await agent.forget(ME))["dialogues"] == 1  # forgetting still works
