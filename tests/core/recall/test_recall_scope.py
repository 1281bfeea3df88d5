"""Recall on the embedded PostgreSQL: session scope, anchor counts, windows, expiry, time."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import asyncpg
import pytest

from memory_core.models import TurnInput
from memory_core.recall.options import RecallOptions
from tests.turns import said

T0 = datetime(2024, 1, 16, 10, 0, tzinfo=timezone.utc)


def turn(
    user: int,
    text: str,
    minutes: float,
    group: int | None = None,
    role: str = "user",
    message_id: int | None = None,
) -> TurnInput:
    at = T0 + timedelta(minutes=minutes)
    return said(user, text, at, group, role=role, name="小明", message_id=message_id)


NOW = T0 + timedelta(days=1)


@pytest.mark.parametrize("exact_max_rows", [20_000, 0], ids=["exact-query", "index-query"])
async def test_session_gets_min_top_n_anchors_and_only_its_rows_among_100x_more(
    memory_factory, exact_max_rows
):
    memory = await memory_factory(memory_exact_search_max_rows=exact_max_rows)
    # The asked session has 5 turns; 100x more rows in other sessions say the same thing.
    mine = [turn(1, f"我喜欢吃苹果和香蕉 {i}", i, group=500) for i in range(5)]
    others = [
        turn(2 + i % 50, f"我喜欢吃苹果和香蕉 {i}", i, group=500 if i % 2 else None)
        for i in range(500)
    ]
    # A bulk import builds the index of every session above the limit (all, for index-query).
    async with memory.parts.upkeep.vector_index_deferred():
        await memory.parts.writer.add_dialogues(others + mine)
    assert memory.parts.vector_index.serves("500:1", 5) == (exact_max_rows == 0)
    for top_n in (1, 3, 5, 8):
        result = await memory.parts.retriever.recall(
            1, "苹果香蕉", 500, RecallOptions(top_n=top_n, window_size=0, now=NOW)
        )
        assert len(result.windows) == min(top_n, 5)
        assert {t.session_key for t in result.turns} == {"500:1"}


async def test_private_group_and_other_user_scopes_never_mix(memory_factory):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues(
        [
            turn(1, "我的订单号是 ORD-PRIVATE", 0),
            turn(1, "我的订单号是 ORD-GROUP-A", 1, group=100),
            turn(2, "我的订单号是 ORD-OTHER-USER", 2, group=100),
            turn(1, "我的订单号是 ORD-GROUP-B", 3, group=200),
        ]
    )
    cases = {
        (1, None): "ORD-PRIVATE",
        (1, 100): "ORD-GROUP-A",
        (2, 100): "ORD-OTHER-USER",
        (1, 200): "ORD-GROUP-B",
    }
    for (user, group), expected in cases.items():
        turns = await memory.parts.retriever.get_contextual_memory(
            user, "订单号", group, top_n=5, now=NOW
        )
        assert [t.content.split()[-1] for t in turns] == [expected]


async def test_windows_widen_anchor_within_session_and_skip_expired_turns(
    memory_factory, fresh_dsn
):
    memory = await memory_factory()
    texts = ["早上好", "今天去公园", "我的猫叫咪咪", "它三岁了", "晚安", "明天见"]
    await memory.parts.writer.add_dialogues([turn(1, t, i) for i, t in enumerate(texts)])
    # Another session interleaved at the same times must never enter the window.
    await memory.parts.writer.add_dialogues([turn(9, f"别人的话 {i}", i + 0.5) for i in range(6)])
    conn = await asyncpg.connect(fresh_dsn)
    try:
        await conn.execute(
            "UPDATE dialogues SET expires_at = $1 WHERE content = '今天去公园'",
            NOW - timedelta(hours=1),
        )
    finally:
        await conn.close()
    result = await memory.parts.retriever.recall(
        1, "我的猫叫咪咪", options=RecallOptions(top_n=1, window_size=2, now=NOW)
    )
    contents = [t.content for t in result.turns]
    # Two live turns each side: the expired one is skipped, so the window reaches one further.
    assert contents == ["早上好", "我的猫叫咪咪", "它三岁了", "晚安"]
    assert all(t.session_key == "1" for t in result.turns)


async def test_overlapping_windows_merge_into_one_time_ordered_window(memory_factory):
    memory = await memory_factory()
    texts = ["猫粮买了", "猫砂也买了", "天气不错", "狗狗在睡觉", "狗粮快没了"]
    await memory.parts.writer.add_dialogues([turn(1, t, i) for i, t in enumerate(texts)])
    result = await memory.parts.retriever.recall(
        1, "猫粮 猫砂", options=RecallOptions(top_n=2, window_size=1, now=NOW)
    )
    assert len(result.windows) == 1  # the two anchors' windows overlap
    window = result.windows[0]
    assert [t.content for t in window.turns] == ["猫粮买了", "猫砂也买了", "天气不错"]
    times = [t.created_at for t in result.turns]
    assert times == sorted(times)
    assert len({t.id for t in result.turns}) == len(result.turns)


async def test_expired_and_future_turns_are_never_recalled(memory_factory, fresh_dsn):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues(
        [
            turn(1, "我住在北京", 0),
            turn(1, "我住在上海", 60 * 48),  # after NOW: a replay at NOW must not see it
        ]
    )
    conn = await asyncpg.connect(fresh_dsn)
    try:
        await conn.execute("UPDATE dialogues SET expires_at = $1 WHERE content = '我住在北京'", NOW)
    finally:
        await conn.close()
    assert await memory.parts.retriever.get_contextual_memory(1, "我住在哪里", now=NOW) == []
    later = NOW + timedelta(days=2)
    recalled = await memory.parts.retriever.get_contextual_memory(1, "我住在哪里", now=later)
    assert [t.content for t in recalled] == ["我住在上海"]


async def test_time_decay_prefers_the_recent_of_two_equal_matches(memory_factory):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues(
        [
            turn(1, "我最喜欢的颜色是蓝色", -60 * 24 * 90),
            turn(1, "我最喜欢的颜色是蓝色。", 0),
        ]
    )
    result = await memory.parts.retriever.recall(
        1, "我最喜欢的颜色是蓝色", options=RecallOptions(top_n=1, window_size=0, now=NOW)
    )
    assert result.turns[0].created_at == T0


async def test_readding_the_same_message_does_not_duplicate(memory_factory):
    memory = await memory_factory()
    first = await memory.parts.writer.add_turn(turn(1, "你好", 0, message_id=42))
    again = await memory.parts.writer.add_turn(turn(1, "你好", 0, message_id=42))
    assert first.turn is not None and not first.duplicate
    assert again.duplicate and again.turn is not None and again.turn.id == first.turn.id
    assert await memory.parts.writer.add_dialogues([turn(1, "你好", 0, message_id=42)]) == 0
    stats = await memory.stats()
    assert stats.total_rows == 1


async def test_empty_session_and_zero_top_n_recall_nothing(memory_factory):
    memory = await memory_factory()
    assert (
        await memory.parts.retriever.recall(1, "任何问题", options=RecallOptions(now=NOW))
    ).turns == ()
    await memory.parts.writer.add_turn(turn(1, "有内容", 0))
    assert (
        await memory.parts.retriever.recall(1, "有内容", options=RecallOptions(top_n=0, now=NOW))
    ).turns == ()
