"""People as an agent meets them, on a real PostgreSQL: a note remembered twice is one turn, a
remembered turn carries the person's name (given, or the newest one seen in that chat), and
``find_people`` names the chats of a person by name, never one the memory keeps nothing of
(an opt-out, a group switched off, another QQ account's memory)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import asyncpg
import pytest
from mcp import Client

from memory_core.agents.mcp_server import build_server
from memory_core.agents.memory import AgentMemory, AgentRefusal
from memory_core.conversation.engine import ConversationEngine
from memory_core.models import TurnInput
from memory_core.personal import opt_out, switch_group_memory
from memory_core.service import TemporalMemory

T0 = datetime.now(timezone.utc) - timedelta(days=1)
RED, STRONG, HIDDEN, QUIET = 21, 22, 23, 24
GROUP, SECRET_GROUP, OFF_GROUP = 901, 902, 903


def agent_of(memory: TemporalMemory) -> AgentMemory:
    engine = ConversationEngine(parts=memory.parts, chat_model=None)
    return AgentMemory(memory.parts, engine, "test")


async def said(
    memory: TemporalMemory,
    user_id: int,
    text: str,
    minute: int,
    *,
    name: str | None,
    group_id: int | None = None,
    account: str = "",
) -> int:
    turn = TurnInput(
        user_id=user_id,
        group_id=group_id,
        role="user",
        content=text,
        sender_name=name,
        created_at=T0 + timedelta(minutes=minute),
        account=account,
    )
    stored = await memory.parts.writer.add_turn(turn)
    assert stored.turn is not None
    return stored.turn.id


async def stored_rows(dsn: str, content: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetch(
            "SELECT id, session_key, sender_name FROM dialogues WHERE content = $1 ORDER BY id",
            content,
        )
    finally:
        await conn.close()


async def test_remembering_the_same_text_twice_stores_one_turn_and_answers_with_its_id(
    memory_factory, fresh_dsn
):
    memory = await memory_factory()
    agent = agent_of(memory)
    first = await agent.remember(RED, "我下周三去北京出差", GROUP)
    assert (first["stored"], first["duplicate"]) == (True, False)
    again = await agent.remember(RED, "  我下周三去北京出差 ", GROUP)
    assert (again["id"], again["duplicate"]) == (first["id"], True)
    assert [r["id"] for r in await stored_rows(fresh_dsn, "我下周三去北京出差")] == [first["id"]]
    # The same words in another chat, or of another person, are theirs to keep.
    private = await agent.remember(RED, "我下周三去北京出差")
    other = await agent.remember(STRONG, "我下周三去北京出差", GROUP)
    assert not private["duplicate"] and not other["duplicate"]
    assert len(await stored_rows(fresh_dsn, "我下周三去北京出差")) == 3
    # What the person said in the chat is already remembered: the note names that message.
    spoken = await said(memory, RED, "我对芒果过敏", 0, name="小红", group_id=GROUP)
    noted = await agent.remember(RED, "我对芒果过敏", GROUP)
    assert (noted["id"], noted["duplicate"], noted["name"]) == (spoken, True, "小红")
    assert len(await stored_rows(fresh_dsn, "我对芒果过敏")) == 1


async def test_a_remembered_turn_carries_the_name_given_or_the_newest_seen_in_that_chat(
    memory_factory, fresh_dsn
):
    memory = await memory_factory()
    agent = agent_of(memory)
    await said(memory, RED, "大家好", 0, name="旧名字", group_id=GROUP)
    await said(memory, RED, "改名了", 1, name="小红", group_id=GROUP)
    await said(memory, STRONG, "你好小红", 2, name="阿强", group_id=GROUP)

    inferred = await agent.remember(RED, "我喜欢爬山", GROUP)
    given = await agent.remember(RED, "我养了一只猫", GROUP, name="  红红  ")
    # Her private chat has no name of hers yet: a group's name is not carried there.
    private = await agent.remember(RED, "私聊里的笔记")
    assert (inferred["name"], given["name"], private["name"]) == ("小红", "红红", None)
    assert [r["sender_name"] for r in await stored_rows(fresh_dsn, "我喜欢爬山")] == ["小红"]
    assert [r["sender_name"] for r in await stored_rows(fresh_dsn, "我养了一只猫")] == ["红红"]
    assert [r["sender_name"] for r in await stored_rows(fresh_dsn, "私聊里的笔记")] == [None]
    # The name a recall shows is the stored one.
    [turn] = (await agent.recall(RED, "爬山", GROUP, top_n=1))["turns"]
    assert turn["sender_name"] == "小红"
    with pytest.raises(AgentRefusal, match="name has 65 characters"):
        await agent.remember(RED, "名字太长", GROUP, name="名" * 65)


async def test_find_people_names_a_persons_chats_and_never_one_outside_the_memory(
    memory_factory,
):
    memory = await memory_factory()
    await said(memory, RED, "群里的话", 0, name="旧名字", group_id=GROUP)
    await said(memory, RED, "群里的话2", 1, name="小红", group_id=GROUP)
    await said(memory, RED, "私聊的话", 2, name="小红🌸", group_id=None)
    await said(memory, STRONG, "我是阿强", 3, name="阿强 Strong", group_id=GROUP)
    await said(memory, HIDDEN, "别记我", 4, name="小红帽", group_id=SECRET_GROUP)
    await said(memory, QUIET, "关掉的群", 5, name="小红花", group_id=OFF_GROUP)
    await said(memory, STRONG, "另一个账号", 6, name="小红姐", account="777/")
    await opt_out(memory.parts.database, HIDDEN, SECRET_GROUP)  # /不记我 there
    await switch_group_memory(memory.parts.database, OFF_GROUP, on=False)  # /群记忆 关
    agent = agent_of(memory)

    found = await agent.find_people(" 小红 ")
    assert [(c["user_id"], c["group_id"], c["name"]) for c in found["chats"]] == [
        (RED, None, "小红🌸"),
        (RED, GROUP, "小红"),
    ]
    assert found["chats"][0]["last_seen"].startswith(
        (T0 + timedelta(minutes=2)).astimezone(memory.parts.tz).isoformat()[:16]
    )
    strong = await agent.find_people("strong")  # any case
    assert [(c["user_id"], c["group_id"]) for c in strong["chats"]] == [(STRONG, GROUP)]
    # Only the newest name counts: she is 小红 now.
    assert (await agent.find_people("旧名字"))["chats"] == []

    # The tool, read-only too, through the SDK's in-process client.
    server = build_server(lambda: agent, readonly=True)
    async with Client(server) as client:
        assert [t.name for t in (await client.list_tools()).tools] == ["find_people", "recall"]
        result = await client.call_tool("find_people", {"text": "阿强"})
        assert not result.is_error and isinstance(result.structured_content, dict)
        assert [c["user_id"] for c in result.structured_content["chats"]] == [STRONG]
        refused = await client.call_tool("find_people", {"text": "  "})
        assert refused.is_error
