"""Forgetting one item reaches the audit log: a 撤回, a /忘记 <编号> and a console delete clear
the texts of the entries about that turn or memory (and what went with it), and only those."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from memory_core.console import MemoryConsole
from memory_core.distill.memory import ExtractedMemory
from memory_core.models import RecalledMessage, TurnInput
from memory_core.personal import forget_memories
from memory_core.storage.audit_log import PgAuditLogStore

BOT, ME = 10001, 1
T0 = datetime(2024, 1, 16, 10, 0, tzinfo=timezone.utc)
SECRET = "我的银行卡密码是778899，别告诉别人"
FACT = "用户的银行卡密码是778899"
KEPT = "今天天气不错"
ACTOR = "控制台@127.0.0.1"


def turn(content: str, message_id: int, at: datetime) -> TurnInput:
    return TurnInput(
        user_id=ME, group_id=None, role="user", content=content, message_id=message_id,
        self_id=BOT, sender_name="阿丽", created_at=at,
    )  # fmt: skip


async def seeded(memory):
    """A secret, a fact drawn from it and a turn kept, each pinned in the console (an entry
    holding its text); the console and the secret turn's and the fact's ids."""
    secret = (await memory.parts.writer.add_turn(turn(SECRET, 501, T0))).turn
    kept = (await memory.parts.writer.add_turn(turn(KEPT, 503, T0 + timedelta(minutes=1)))).turn
    saved = await memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content=FACT)], ME, source_turn_ids=[secret.id],
        stated_at=T0,
    )  # fmt: skip
    [fact_id] = saved.ids
    console = MemoryConsole.from_parts(memory.parts)
    key = secret.session_key
    for kind, item in (("turn", secret.id), ("distilled", fact_id), ("turn", kept.id)):
        assert await console.pin(kind, key, item, pinned=True, actor=ACTOR)
    return console, key, secret.id, fact_id


async def texts(memory) -> list[str]:
    entries = await memory.parts.database.store(PgAuditLogStore).audit_log(100, 0)
    return [t for e in entries for t in (e.before_text, e.after_text) if t is not None]


async def test_a_recalled_message_clears_its_and_its_facts_audit_texts(memory_factory):
    memory = await memory_factory()
    await seeded(memory)
    assert sum("778899" in t for t in await texts(memory)) == 4  # two pins, before and after

    assert (
        await memory.parts.forgetting.delete_message(RecalledMessage(BOT, 501, user_id=ME))
        is not None
    )

    left = await texts(memory)
    assert not [t for t in left if "778899" in t], left
    assert left == [KEPT, KEPT]  # the turn not recalled keeps its entry's texts


async def test_forgetting_a_fact_by_its_number_clears_its_and_its_sources_audit_texts(
    memory_factory,
):
    memory = await memory_factory()
    _, _, _, fact_id = await seeded(memory)

    forgotten = await forget_memories(
        memory.parts.database, memory.parts.spool, ME, None, [fact_id]
    )

    assert (forgotten.facts, forgotten.dialogues) == (1, 1)
    assert await texts(memory) == [KEPT, KEPT]


async def test_a_console_delete_keeps_the_text_in_the_bin_alone_and_a_restore_brings_it_back(
    memory_factory,
):
    memory = await memory_factory()
    console, key, secret_id, _ = await seeded(memory)

    bin_id = await console.delete("turn", key, secret_id, actor=ACTOR)

    assert bin_id is not None
    # The turn and the fact drawn from it are in the bin; the log says what was deleted, by
    # whom, and holds neither text.
    assert not [t for t in await texts(memory) if "778899" in t]
    entries = await console.audit_log()
    deletes = [e for e in entries if e.action == "delete"]
    assert {(e.target_kind, e.before_text, e.after_text) for e in deletes} == {
        ("turn", None, None),
        ("distilled", None, None),
    }
    assert any(SECRET in b.summary for b in await console.recycle_bin(key))

    await console.restore(bin_id, actor=ACTOR)
    assert SECRET in await texts(memory)  # restored: the restore's entry names it again
