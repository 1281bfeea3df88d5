"""/forget and turns waiting in the spool: a forget takes the spooled turns of its scope with
it, and a forget made while the database is down is done once it is back."""

from __future__ import annotations

from datetime import datetime, timezone

from memory_core.distill.memory import ExtractedMemory
from memory_core.models import ForgetScope, TurnInput
from tests.core.storage.test_database_outage import open_via_proxy, proxy, stored_contents

__all__ = ["proxy"]  # the fixture, used by name


def said(user_id: int, text: str, message_id: int, group_id: int | None = None) -> TurnInput:
    return TurnInput(
        user_id=user_id, group_id=group_id, role="user", content=text, message_id=message_id
    )


async def spooled_texts(memory) -> list[str]:
    entries, _ = await memory.parts.spool.read()
    return [getattr(entry.item, "content", repr(entry.item)) for entry in entries]


async def test_forget_takes_the_users_spooled_turns_too_and_leaves_others(
    proxy, fresh_dsn, tmp_data_dir, hashing_embedder
):
    memory = await open_via_proxy(proxy, fresh_dsn, tmp_data_dir, hashing_embedder)
    try:
        await memory.parts.writer.add_turn(said(7, "停电前：我的密码是778899", 1))
        await proxy.stop()
        await memory.parts.writer.add_turn(said(7, "停电时：我的新密码是112233", 2))
        await memory.parts.writer.add_turn(said(7, "停电时在群里说的", 3, group_id=500))
        await memory.parts.writer.add_turn(said(8, "别人停电时说的", 4))
        await proxy.start()
        # Connected again, the spool not flushed yet.
        forgotten = await memory.parts.forgetting.forget(ForgetScope(user_id=7))
        assert (forgotten.dialogues, forgotten.deferred) == (3, False)
        assert await spooled_texts(memory) == ["别人停电时说的"]
        await memory.parts.forgetting.flush_spool()
        assert await stored_contents(fresh_dsn) == ["别人停电时说的"]
    finally:
        await memory.aclose()


async def test_forget_me_with_the_database_down_drops_spooled_turns_and_finishes_when_it_is_back(
    proxy, fresh_dsn, tmp_data_dir, hashing_embedder
):
    memory = await open_via_proxy(proxy, fresh_dsn, tmp_data_dir, hashing_embedder)
    try:
        await memory.parts.writer.add_turn(said(7, "停电前：我的密码是778899", 1))
        await memory.parts.keeper.save(
            [ExtractedMemory(kind="facts", content="用户的密码是778899")], 7
        )
        await memory.parts.writer.add_turn(said(8, "别人停电前说的", 2))
        await proxy.stop()
        await memory.parts.writer.add_turn(said(7, "停电时：我的新密码是112233", 3))
        await memory.parts.writer.add_turn(said(8, "别人停电时说的", 4))

        forgotten = await memory.parts.forgetting.forget(ForgetScope(user_id=7))

        assert (forgotten.dialogues, forgotten.deferred) == (1, True)
        entries, _ = await memory.parts.spool.read()
        assert "112233" not in (tmp_data_dir / "spool.jsonl").read_text("utf-8")
        assert [type(e.item).__name__ for e in entries] == ["TurnInput", "ForgetScope"]
        # Said after the forget, still during the outage: kept.
        await memory.parts.writer.add_turn(said(7, "忘记之后说的新话", 5))
        await proxy.start()
        await memory.parts.forgetting.flush_spool()
        assert sorted(await stored_contents(fresh_dsn)) == sorted(
            ["别人停电前说的", "别人停电时说的", "忘记之后说的新话"]
        )
        now = datetime.now(timezone.utc)
        assert await memory.parts.keeper.recall(7, None, "密码", now=now) == []
        assert await spooled_texts(memory) == []
    finally:
        await memory.aclose()
