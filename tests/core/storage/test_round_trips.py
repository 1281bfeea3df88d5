"""Statements merged to save round trips on the reply path, on the real database: a message's
session tail (last turn time + short-term turns), the daily counters in one statement, and
embedding batches written all or none without an explicit transaction."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import numpy as np
import pytest

from memory_core.dialogue.recall_store import PgRecallStore
from memory_core.dialogue.upkeep_store import PgUpkeepStore
from memory_core.errors import StorageError
from memory_core.models import TurnInput
from memory_core.storage.counters import PgCounterStore

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(minutes=30)


def turn(minute: float, content: str, user: int = 1, group: int | None = None) -> TurnInput:
    return TurnInput(
        user_id=user,
        group_id=group,
        role="user",
        content=content,
        message_id=int(minute * 100) + user * 100_000 + (group or 0),
        created_at=T0 + timedelta(minutes=minute),
    )


async def test_session_tail_is_the_last_turn_time_and_the_recent_turns_read_apart(
    memory_factory,
):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues(
        [
            turn(1, "早就说过的话"),  # before the window
            *(turn(20 + i, f"窗口里的第{i}句") for i in range(5)),
            turn(40, "时钟之后的一句"),  # after now: neither the last turn nor recent
            turn(29, "另一个会话", user=2),
            turn(29.5, "群里的话", group=700),
        ]
    )
    since = NOW - timedelta(minutes=15)
    for limit in (3, 10):
        tail = await dialogues(memory).session_tail("1", since=since, now=NOW, limit=limit)
        assert tail.last_turn_at == await dialogues(memory).last_turn_time("1", NOW)
        assert tail.last_turn_at == T0 + timedelta(minutes=24)
        recent = await memory.parts.retriever.recent_turns(
            1, None, limit=limit, since=since, now=NOW
        )
        assert list(tail.recent) == recent
        assert [t.content for t in tail.recent] == [f"窗口里的第{i}句" for i in range(5)][-limit:]


async def test_session_tail_without_recent_turns_still_gives_the_last_turn_time(
    memory_factory,
):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues([turn(1, "半小时前的话")])
    quiet = await dialogues(memory).session_tail(
        "1", since=NOW - timedelta(minutes=5), now=NOW, limit=6
    )
    assert quiet.last_turn_at == T0 + timedelta(minutes=1)
    assert quiet.recent == ()
    empty = await dialogues(memory).session_tail("9", since=T0, now=NOW, limit=6)
    assert empty.last_turn_at is None
    assert empty.recent == ()


def dialogues(memory) -> PgRecallStore:
    return memory.parts.database.store(PgRecallStore)


async def test_a_group_tail_holds_every_members_recent_turns_of_that_group_only(memory_factory):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues(
        [
            turn(10, "成员1早些时候", user=1, group=700),
            turn(21, "成员1在群里", user=1, group=700),
            turn(22, "成员2在群里", user=2, group=700),
            turn(23, "成员2在别的群", user=2, group=800),
            turn(24, "成员2私聊", user=2),
            turn(40, "时钟之后", user=2, group=700),
        ]
    )
    since = NOW - timedelta(minutes=15)
    tail = await dialogues(memory).session_tail(
        "700:1", since=since, now=NOW, limit=6, group_id=700
    )
    assert tail.last_turn_at == T0 + timedelta(minutes=21)  # the member's own last turn
    assert [t.content for t in tail.recent] == ["成员1在群里", "成员2在群里"]
    newest = await dialogues(memory).session_tail(
        "700:1", since=since, now=NOW, limit=1, group_id=700
    )
    assert [t.content for t in newest.recent] == ["成员2在群里"]
    own = await dialogues(memory).session_tail("700:1", since=since, now=NOW, limit=6)
    assert [t.content for t in own.recent] == ["成员1在群里"]


async def daily(memory, day: date) -> dict[str, int]:
    return await memory.parts.database.store(PgCounterStore).metric_totals(day)


async def test_several_daily_counters_are_added_in_one_statement_zeros_skipped(memory_factory):
    memory = await memory_factory()
    day = NOW.astimezone(memory.parts.tz).date()
    counters = memory.parts.database.store(PgCounterStore)
    await counters.bump(day, {"a": 1, "b": 250, "zero": 0})
    await counters.bump(day, {"a": 1, "b": 50, "c": 1})
    assert await daily(memory, day) == {"a": 2, "b": 300, "c": 1}
    await counters.bump(day, {"zero": 0})  # nothing to count: no statement, no row
    assert "zero" not in await daily(memory, day)


async def test_an_embedding_batch_is_written_all_or_none(memory_factory):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues([turn(1, "第一句"), turn(2, "第二句")])
    ids = [
        t.id for t in await memory.parts.retriever.recent_turns(1, None, limit=5, since=T0, now=NOW)
    ]
    assert len(ids) == 2
    store = memory.parts.database.store(PgUpkeepStore)
    dim = memory.parts.embedder.dim
    good = np.full(dim, 0.5, dtype=np.float32)
    bad = np.full(dim, np.nan, dtype=np.float32)  # the vector types refuse NaN
    # The second row fails after the first was written: that first write must be undone.
    with pytest.raises(StorageError, match="NaN"):
        await store.set_embeddings(ids, np.stack([good, bad]), "probe-model")
    async with memory.parts.database.pool.acquire() as conn:
        models = await conn.fetch(
            "SELECT embedding_model FROM dialogues WHERE id = ANY($1::bigint[])", ids
        )
    assert "probe-model" not in {r["embedding_model"] for r in models}
    await store.set_embeddings(ids, np.stack([good, good]), "probe-model")
    async with memory.parts.database.pool.acquire() as conn:
        models = await conn.fetch(
            "SELECT embedding_model FROM dialogues WHERE id = ANY($1::bigint[])", ids
        )
    assert {r["embedding_model"] for r in models} == {"probe-model"}
