"""Forgetting a person reaches the audit log: the texts of their entries (an MCP ``remember``
note, a ``recall`` query) go with their memories, the entries stay, and nobody else's do."""

from __future__ import annotations

from memory_core.agents.memory import AgentMemory
from memory_core.conversation.engine import ConversationEngine
from memory_core.models import ForgetScope
from memory_core.service import TemporalMemory
from memory_core.storage.audit_log import PgAuditLogStore

ME, OTHER, GROUP = 11, 12, 900


def agent_of(memory: TemporalMemory) -> AgentMemory:
    engine = ConversationEngine(parts=memory.parts, chat_model=None)
    return AgentMemory(memory.parts, engine, "test")


async def audit_texts(memory: TemporalMemory) -> list[tuple[str, str, str | None]]:
    entries = await memory.parts.database.store(PgAuditLogStore).audit_log(100, 0)
    return sorted((e.session_key or "", e.action, e.after_text) for e in entries)


async def test_forgetting_a_person_clears_their_audit_texts_and_keeps_everyone_elses(
    memory_factory,
):
    memory = await memory_factory()
    agent = agent_of(memory)
    await agent.remember(ME, "我的银行卡密码是778899")
    await agent.remember(ME, "群里的暗号是青蛙", group_id=GROUP)
    await agent.recall(ME, "银行卡密码")
    await agent.remember(OTHER, "我的车牌是浙A12345")

    await memory.parts.forgetting.forget(ForgetScope(user_id=ME, group_id=GROUP))
    texts = await audit_texts(memory)
    assert (f"{GROUP}:{ME}", "remember", None) in texts  # the entry stays, its text goes
    assert (str(ME), "remember", "我的银行卡密码是778899") in texts  # another chat of ME

    await memory.parts.forgetting.forget(ForgetScope(user_id=ME))
    texts = await audit_texts(memory)
    mine = [t for t in texts if t[0] in (str(ME), f"{GROUP}:{ME}")]
    assert [action for _, action, _ in mine] == ["recall", "remember", "remember"]
    assert all(text is None for _, _, text in mine), mine
    assert (str(OTHER), "remember", "我的车牌是浙A12345") in texts
