"""Forgetting reaches every copy of a turn (real PostgreSQL, a real spool directory): a turn
the database refused for good sits in the dead-letter file (``<spool>.dead.jsonl``) with its
text, and a /忘记我, a 撤回 and a /忘记 <内容> drop it there (and from the live spool), while
everyone else's records stay, byte for byte."""

from __future__ import annotations

import json
import logging
from datetime import datetime, timezone

from memory_core.models import ForgetScope, RecalledMessage, TurnInput
from memory_core.personal import Named, forget_named
from tests.core.storage.test_database_outage import refuse_inserts

BOT = 10001
ALICE, BOB, GROUP = 1, 2, 300
ALICE_SECRET = "拒收：我的病历号是MR-9911"
BOB_LINE = "拒收：我的车牌是沪A12345"


async def refuse_marked_turns(dsn: str) -> None:
    """PostgreSQL refuses every dialogue row holding 拒收 for its value (SQLSTATE 22023):
    the writer dead-letters such a turn for good."""
    await refuse_inserts(dsn, "22023", "NEW.content LIKE '%拒收%'")


def said(user: int, text: str, message_id: int, group: int | None = None) -> TurnInput:
    return TurnInput(
        user_id=user, group_id=group, role="user", content=text, message_id=message_id,
        self_id=BOT,
    )  # fmt: skip


def dead_contents(memory) -> list[str]:
    path = memory.parts.spool.dead_path
    if not path.exists():
        return []
    return [json.loads(line)["item"]["content"] for line in path.read_text("utf-8").splitlines()]


async def dead_lettered(memory, *turns: TurnInput) -> None:
    for turn in turns:
        outcome = await memory.parts.writer.add_turn(turn)
        assert outcome.dead_lettered, turn.content


async def test_forget_me_drops_the_persons_dead_letters_and_keeps_the_others(
    memory_factory, fresh_dsn, caplog
):
    caplog.set_level(logging.INFO)
    memory = await memory_factory()
    await refuse_marked_turns(fresh_dsn)
    await dead_lettered(
        memory,
        said(ALICE, ALICE_SECRET, 1),
        said(BOB, BOB_LINE, 2),
        said(ALICE, "拒收：群里也说过病历号", 3, GROUP),
    )
    path = memory.parts.spool.dead_path
    # Lines a crash tore: one of Bob's, one of Alice's (her text cut short), and a torn spool
    # line of Alice's buried as its text (what a flush does with a line it cannot read).
    torn_spool_line = json.dumps('{"user_id": 1, "role": "user", "content": "MR-9911 又说')
    with path.open("ab") as handle:
        handle.write(b'{"item": {"user_id": 2, "con\n')
        handle.write(b'{"item": {"user_id": 1, "role": "user", "content": "MR-99\n')
        handle.write(f'{{"item": {torn_spool_line}, "error": "unreadable line"}}\n'.encode())
    [bob_line] = [line for line in path.read_bytes().splitlines() if BOB_LINE.encode() in line]

    forgotten = await memory.parts.forgetting.forget(ForgetScope(user_id=ALICE))

    assert forgotten.dialogues == 4  # Alice's dead letters in every chat, and her torn lines
    assert [line for line in path.read_bytes().splitlines()] == [
        bob_line,
        b'{"item": {"user_id": 2, "con',
    ]
    assert "MR-9911" not in path.read_text("utf-8", "replace")
    assert not list(path.parent.glob("*.tmp"))  # rewritten by rename, nothing left behind
    assert (await memory.stats()).dead_letters == 2
    # Neither the dead-lettering nor the forget logged what was said (STYLE.md habit 16).
    assert not [r for r in caplog.records if "MR-9911" in r.getMessage() or "沪A" in r.getMessage()]
    assert any("dead-lettered turn(s) forgotten" in r.getMessage() for r in caplog.records)


async def test_a_recall_of_a_dead_lettered_message_removes_it_and_only_it(
    memory_factory, fresh_dsn
):
    memory = await memory_factory()
    await refuse_marked_turns(fresh_dsn)
    await dead_lettered(
        memory,
        said(ALICE, ALICE_SECRET, 501),
        # The same 32-bit message id from another person, and in a group: not the recalled one.
        said(BOB, BOB_LINE, 501),
        said(ALICE, "拒收：群里的一句", 501, GROUP),
    )
    forgotten = await memory.parts.forgetting.delete_message(
        RecalledMessage(self_id=BOT, message_id=501, user_id=ALICE)
    )
    assert forgotten is not None
    assert dead_contents(memory) == [BOB_LINE, "拒收：群里的一句"]


async def test_a_recall_of_a_message_still_in_the_spool_keeps_the_flush_from_writing_it(
    memory_factory, fresh_dsn
):
    memory = await memory_factory()
    spool = memory.parts.spool
    # Spooled while the database refused writes (as the writer keeps it), then recalled once
    # the database takes writes again, before any flush.
    await spool.append(
        memory.parts.writer.prepare(said(ALICE, "我的密码是1234", 7), datetime.now(timezone.utc))[0]
    )
    await spool.append(
        memory.parts.writer.prepare(said(BOB, "鲍勃的话", 8), datetime.now(timezone.utc))[0]
    )
    await memory.parts.forgetting.delete_message(
        RecalledMessage(self_id=BOT, message_id=7, user_id=ALICE)
    )
    assert spool.pending() == 1
    assert await memory.parts.forgetting.flush_spool() == 1
    async with memory.parts.database.pool.acquire() as conn:
        stored = [r["content"] for r in await conn.fetch("SELECT content FROM dialogues")]
    assert stored == ["鲍勃的话"]


async def test_forgetting_a_word_drops_the_chats_dead_letters_holding_it(memory_factory, fresh_dsn):
    memory = await memory_factory()
    await refuse_marked_turns(fresh_dsn)
    await dead_lettered(
        memory,
        said(ALICE, ALICE_SECRET, 1),
        said(ALICE, "拒收：今天天气不错", 2),
        said(ALICE, "拒收：群里的MR-9911", 3, GROUP),  # another chat of hers
        said(BOB, "拒收：mr-9911 是鲍勃的", 4),
    )
    forgotten = await forget_named(
        memory.parts.database, memory.parts.spool, Named(ALICE, None, word="mr-9911")
    )
    assert forgotten.dialogues == 1
    assert dead_contents(memory) == [
        "拒收：今天天气不错",
        "拒收：群里的MR-9911",
        "拒收：mr-9911 是鲍勃的",
    ]
