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


async def test_a_search_by_name_is_forgotten_with_the_person_found(memory_factory):
    memory = await memory_factory()
    agent = agent_of(memory)
    await agent.remember(ME, "我喜欢爬山", name="爱丽丝")
    await agent.remember(ME, "群里也说说", group_id=GROUP, name="爱丽丝")
    await agent.remember(OTHER, "我喜欢游泳", name="鲍勃")

    found = await agent.find_people("爱丽")
    assert {(c["user_id"], c["group_id"]) for c in found["chats"]} == {(ME, None), (ME, GROUP)}
    await agent.find_people("鲍勃")
    await agent.find_people("没有这个人")

    def searched(texts: list[tuple[str, str, str | None]]) -> list[str]:
        return [key for key, action, _ in texts if action == "find"]

    entries = await memory.parts.database.store(PgAuditLogStore).audit_log(100, 0)
    finds = {(e.session_key, e.before_text) for e in entries if e.action == "find"}
    # One entry per chat found, in that chat; a search that found no one keeps no text.
    assert finds == {
        (str(ME), "爱丽"), (f"{GROUP}:{ME}", "爱丽"), (str(OTHER), "鲍勃"), (None, None),
    }  # fmt: skip
    assert not any("没有这个人" in str(e) for e in entries)

    await memory.parts.forgetting.forget(ForgetScope(user_id=ME))

    entries = await memory.parts.database.store(PgAuditLogStore).audit_log(100, 0)
    assert not any("爱丽" in (e.before_text or "") + (e.after_text or "") for e in entries)
    assert (str(OTHER), "鲍勃") in {(e.session_key, e.before_text) for e in entries}
    assert len(searched(await audit_texts(memory))) == 4  # the entries stay, without the name
