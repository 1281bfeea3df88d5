"""Hybrid recall: fusion stays session-scoped; roles, required keywords and time."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from memory_core.dialogue.recall_store import AnchorCandidate
from memory_core.models import TurnInput
from memory_core.recall import retriever
from memory_core.recall.options import RecallOptions
from memory_core.recall.ranking import (
    NO_DECAY,
    Channel,
    DecayPolicy,
    TimeScope,
    decay_for_match,
    decayed_order,
    fuse_channels,
    keyword_confidence,
)
from tests.turns import said as said_by

SH = timezone(timedelta(hours=8))
# Monday 2024-01-15 10:00 in Shanghai.
NOW = datetime(2024, 1, 15, 10, 0, tzinfo=SH)


def said(
    text: str,
    at: datetime,
    user: int = 1,
    group: int | None = None,
    role: str = "user",
) -> TurnInput:
    return said_by(user, text, at, group, role=role)


def ago(**delta: float) -> datetime:
    return NOW - timedelta(**delta)


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "vector"])
@pytest.mark.parametrize("exact_max_rows", [20_000, 0], ids=["exact-query", "index-query"])
async def test_fusion_never_leaks_other_sessions_with_100x_more_matching_rows(
    memory_factory, mode, exact_max_rows
):
    memory = await memory_factory(memory_exact_search_max_rows=exact_max_rows)
    mine = [
        said(f"订单ORD777的快递到了上海 {i}", ago(days=3, minutes=-i), group=500) for i in range(4)
    ]
    others = [
        said(
            f"订单ORD777的快递到了上海 {i}",
            ago(days=1, minutes=-i),
            user=2 + i % 40,
            group=500 if i % 2 else None,
        )
        for i in range(400)
    ]
    # The asked user's private chat also matches, and is another session too.
    others.append(said("订单ORD777的快递到了上海", ago(hours=1), user=1))
    # A bulk import builds the index of every session above the limit (all, for index-query).
    async with memory.parts.upkeep.vector_index_deferred():
        await memory.parts.writer.add_dialogues(others + mine)
    assert memory.parts.vector_index.serves("500:1", 5) == (exact_max_rows == 0)
    for query in ("ORD777 快递", "三天前的快递到哪了", "刚才说的订单"):
        result = await memory.parts.retriever.recall(
            1, query, 500, RecallOptions(top_n=8, window_size=2, mode=mode, now=NOW)
        )
        assert result.turns, query
        assert {t.session_key for t in result.turns} == {"500:1"}, query
        assert len(result.turns) <= 4


def test_reciprocal_rank_fusion_rewards_turns_found_by_both_channels():
    def cand(i: int) -> AnchorCandidate:
        return AnchorCandidate(i, NOW - timedelta(days=1), 0.8)

    ranked = fuse_channels(
        [
            Channel("vector", [cand(1), cand(2), cand(3)]),
            Channel("keyword", [cand(4), cand(3)]),
        ]
    )
    assert ranked[0].candidate.id == 3
    assert {r.candidate.id for r in ranked} == {1, 2, 3, 4}
    heavier = fuse_channels(
        [Channel("vector", [cand(1)]), Channel("keyword", [cand(4)], weight=2.0)]
    )
    assert [r.candidate.id for r in heavier] == [4, 1]


def test_a_keyword_hit_matching_little_of_the_query_cannot_outvote_the_vector_channel():
    def cand(i: int) -> AnchorCandidate:
        return AnchorCandidate(i, NOW - timedelta(days=1), 0.8)

    vector = Channel("vector", [cand(1), cand(2)])
    weak = Channel("keyword", [cand(2), cand(3)], strengths={2: 1.0, 3: 0.1})
    assert [r.candidate.id for r in fuse_channels([vector, weak])][:2] == [2, 1]
    filler_only = Channel("keyword", [cand(3), cand(2)], strengths={3: 0.1, 2: 0.1})
    assert [r.candidate.id for r in fuse_channels([vector, filler_only])][:2] == [2, 1]
    assert fuse_channels([vector, filler_only])[-1].candidate.id == 3


def test_time_decay_orders_each_channel_and_fusion_can_keep_only_a_time_range():
    old = AnchorCandidate(1, NOW - timedelta(days=200), 0.9)
    new = AnchorCandidate(2, NOW - timedelta(days=1), 0.9)
    # Equal scores: the recent one first; a clearly better old match still wins.
    assert decayed_order([old, new], [5.0, 5.0], now=NOW, decay=DecayPolicy()) == [new, old]
    assert decayed_order([old, new], [9.0, 5.0], now=NOW, decay=DecayPolicy()) == [old, new]
    only_recent = fuse_channels(
        [Channel("vector", [old, new])], within=TimeScope(NOW - timedelta(days=7), NOW)
    )
    assert [r.candidate.id for r in only_recent] == [2]


async def test_role_filter_anchors_only_the_users_turns_but_windows_stay_whole(memory_factory):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues(
        [
            said("我想养一只猫", ago(hours=5)),
            said("养猫要准备猫砂和猫粮", ago(hours=5, minutes=-1), role="assistant"),
            said("猫粮买哪个牌子好", ago(hours=4)),
            said("猫粮推荐皇家", ago(hours=4, minutes=-1), role="assistant"),
        ]
    )
    result = await memory.parts.retriever.recall(
        1, "猫粮 猫砂", options=RecallOptions(top_n=5, window_size=1, roles=["user"], now=NOW)
    )
    anchors = {t.id: t for t in result.turns}
    assert result.windows
    assert all(anchors[a].role == "user" for a in result.anchor_ids)
    assert any(t.role == "assistant" for t in result.turns)  # neighbours are kept
    unfiltered = await memory.parts.retriever.recall(
        1, "猫粮推荐皇家", options=RecallOptions(top_n=1, window_size=0, now=NOW)
    )
    assert unfiltered.turns[0].role == "assistant"


async def test_required_keywords_keep_only_anchors_containing_all_of_them(memory_factory):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues(
        [
            said("快递 ORD555 到北京了", ago(days=2)),
            said("快递 ORD556 到上海了", ago(days=2, minutes=-5)),
            said("快递到了吗", ago(days=1)),
        ]
    )
    for mode in ("hybrid", "vector", "keyword"):
        result = await memory.parts.retriever.recall(
            1,
            "快递到哪了",
            options=RecallOptions(top_n=3, window_size=0, keywords=["ord556"], mode=mode, now=NOW),
        )
        assert [t.content for t in result.turns] == ["快递 ORD556 到上海了"], mode
    nothing = await memory.parts.retriever.recall(
        1, "快递", options=RecallOptions(keywords=["ORD999"], now=NOW)
    )
    assert nothing.turns == ()


async def test_a_pure_time_question_keeps_only_anchors_inside_the_range(memory_factory):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues(
        [
            said("我们昨天聊了很多关于旅行的事", ago(days=5)),  # says 昨天, but 5 days ago
            said("今天中午吃了牛肉面", ago(days=1, hours=1)),  # yesterday 09:00
            said("下午去打了羽毛球", ago(days=1, hours=-3)),  # yesterday 13:00
            said("刚才在看电影", ago(minutes=10)),
        ]
    )
    result = await memory.parts.retriever.recall(
        1, "昨天我们聊了什么", options=RecallOptions(top_n=3, window_size=0, now=NOW)
    )
    assert {t.content for t in result.turns} == {"今天中午吃了牛肉面", "下午去打了羽毛球"}
    # Without time understanding the words decide, and 昨天 matches the wrong day.
    blind = await memory.parts.retriever.recall(
        1,
        "昨天我们聊了什么",
        options=RecallOptions(top_n=1, window_size=0, time_aware=False, now=NOW),
    )
    assert [t.content for t in blind.turns] == ["我们昨天聊了很多关于旅行的事"]


async def test_a_pure_time_question_with_nothing_in_its_range_falls_back_to_any_time(
    memory_factory,
):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues(
        [said("我们聊了很多关于旅行的事", ago(days=5)), said("刚才在看电影", ago(minutes=10))]
    )
    # Nothing was said yesterday: the best matches of any time, not "nothing found".
    result = await memory.parts.retriever.recall(
        1, "昨天我们聊了什么", options=RecallOptions(top_n=2, window_size=0, now=NOW)
    )
    assert {t.content for t in result.turns} == {"我们聊了很多关于旅行的事", "刚才在看电影"}


async def test_a_time_expression_with_a_topic_boosts_the_range(memory_factory):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues(
        [
            said("小明推荐了一家火锅店，叫海底捞", ago(days=40)),
            said("小明推荐了一家烤肉店，叫姜虎东", ago(days=5)),  # last week (Jan 10)
            said("小明推荐了一家火锅店，叫小龙坎", ago(hours=2)),
        ]
    )
    result = await memory.parts.retriever.recall(
        1, "上周小明推荐的店", options=RecallOptions(top_n=1, window_size=0, now=NOW)
    )
    assert [t.content for t in result.turns] == ["小明推荐了一家烤肉店，叫姜虎东"]


async def test_just_now_prefers_the_latest_turns(memory_factory):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues(
        [
            said("链接是 https://a.example/old", ago(days=3)),
            said("链接发你了 https://b.example/new", ago(minutes=5)),
            said("好的", ago(minutes=4), role="assistant"),
        ]
    )
    result = await memory.parts.retriever.recall(
        1, "刚才你发的链接", options=RecallOptions(top_n=1, window_size=0, now=NOW)
    )
    assert [t.content for t in result.turns] == ["链接发你了 https://b.example/new"]


async def test_hybrid_recall_falls_back_to_keywords_when_the_query_cannot_be_embedded(
    memory_factory, hashing_embedder
):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues([said("我的车牌号是京A12345", ago(days=1))])
    hashing_embedder.fail = True
    result = await memory.parts.retriever.recall(1, "京A12345", options=RecallOptions(now=NOW))
    assert [t.content for t in result.turns] == ["我的车牌号是京A12345"]
    assert (
        await memory.parts.retriever.recall(
            1, "京A12345", options=RecallOptions(mode="vector", now=NOW)
        )
    ).turns == ()


async def test_keyword_search_of_a_large_session_finds_its_one_rare_term(memory_factory):
    # Above CUSTOM_PLAN_MIN_ROWS the keyword query is planned for this session and term.
    chatter = [said(f"今天也在摸鱼聊天 {i}", ago(days=2, minutes=i)) for i in range(2_100)]
    rare = said("快递单号是 SF1234567890", ago(days=3))
    others = [said("快递单号是 SF1234567890", ago(days=1), user=2)]
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues([*chatter, rare, *others])
    for _ in range(7):  # past the five custom plans of a prepared statement
        result = await memory.parts.retriever.recall(
            1, "SF1234567890", options=RecallOptions(top_n=1, window_size=0, mode="keyword")
        )
        assert [t.content for t in result.turns] == ["快递单号是 SF1234567890"]
        assert {t.user_id for t in result.turns} == {1}


def test_decay_ranks_only_a_near_tie_when_a_tie_margin_is_set():
    decay = DecayPolicy(min_weight=0.9)
    assert decay_for_match(decay, [0.90, 0.897, 0.5], 0.005) is decay
    assert decay_for_match(decay, [0.88, 0.90, 0.5], 0.005) is NO_DECAY
    assert decay_for_match(decay, [0.90, 0.70], None) is decay
    assert decay_for_match(decay, [0.90], 0.005) is decay


def test_keyword_confidence_is_nothing_for_a_tie_and_full_for_a_clear_lead():
    assert keyword_confidence([3.0, 3.0, 1.0]) == 0.0
    assert keyword_confidence([3.0, 5.0]) == 1.0
    assert keyword_confidence([3.3, 3.0]) == pytest.approx(0.4)
    assert keyword_confidence([2.0]) == 1.0
    assert keyword_confidence([]) == 0.0


@pytest.mark.parametrize("tie_margin", [None, 0.005])
async def test_an_old_clearly_best_match_is_not_decayed_below_a_newer_weaker_one(
    memory_factory, tie_margin, monkeypatch
):
    monkeypatch.setattr(retriever, "DECAY", DecayPolicy(min_weight=0.5))
    monkeypatch.setattr(retriever, "DECAY_TIE_MARGIN", tie_margin)
    memory = await memory_factory()
    old, newer = "我最喜欢的颜色是蓝色", "我最喜欢的颜色是蓝色和绿色，还有一点点紫色"
    await memory.parts.writer.add_dialogues([said(old, ago(days=300)), said(newer, ago(days=1))])
    result = await memory.parts.retriever.recall(
        1,
        "我最喜欢的颜色是蓝色",
        options=RecallOptions(top_n=1, window_size=0, mode="vector", now=NOW),
    )
    # Decay always: the old one falls to about half and loses; near ties only: it wins.
    assert [t.content for t in result.turns] == [old if tie_margin else newer]
