"""MEMORY_QUERY_MESSAGE_WEIGHT=rare: the message's share by its own terms that are rare in the
session (``memory_core.recall.message_share``)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from memory_core.dialogue.recall_store import PgRecallStore, RecallScope
from memory_core.models import generate_session_key
from memory_core.recall.message_share import (
    RARE_SHARE_TIERS,
    MessageShare,
    ShareTier,
    is_rare,
    own_terms,
    rare_share,
)
from memory_core.settings import MemorySettings
from tests.turns import said

MESSAGE_FIRST = MessageShare(message_weight=0.5, context_term_weight=0.7)
CONTEXT_LED = MessageShare(message_weight=0.0, context_term_weight=1.0)
OFFICE = ["今天又加班到很晚，累死了", "楼下那家奶茶店今天排了好长的队"]


def test_the_messages_own_terms_are_those_no_earlier_line_has() -> None:
    message = "上次我说想买的那个球拍叫什么来着？"  # 上次, 那个, 什么: question words, dropped
    assert own_terms(message, OFFICE) == ["我说", "说想", "想买", "买的", "球拍", "拍叫", "来着"]
    assert own_terms("又加班了", OFFICE) == ["班了"]  # 又加, 加班: the first line has them
    assert own_terms("the show?", ["I finally watched the show"]) == []


@pytest.mark.parametrize(
    ("frequency", "turns", "rare"),
    [
        (0, 1000, False),  # never said: no evidence of a memory
        (1, 1000, True),
        (7, 1000, True),  # 1000 ** 0.3 = 7.9
        (8, 1000, False),
        (300, 1000, False),  # a chat word
        (1, 8, True),
        (2, 8, False),  # ln 4 / ln 8 = 0.67
        (1, 1, True),
    ],
)
def test_a_term_is_rare_when_said_in_a_few_of_the_sessions_turns(
    frequency: int, turns: int, rare: bool
) -> None:
    assert is_rare(frequency, turns) is rare


def test_two_rare_terms_of_its_own_earn_the_message_its_share() -> None:
    terms = ["想买", "球拍", "来着"]
    assert rare_share(terms, {"想买": 1, "球拍": 2, "来着": 0}, 1000) == MESSAGE_FIRST
    # One rare term is not enough; common and unsaid terms count for nothing.
    assert rare_share(terms, {"想买": 1, "球拍": 400, "来着": 0}, 1000) == CONTEXT_LED
    assert rare_share(terms, {}, 1000) == CONTEXT_LED
    assert rare_share([], {}, 1000) == CONTEXT_LED


def test_the_tiers_are_data_read_highest_first() -> None:
    assert [tier.own_words for tier in RARE_SHARE_TIERS] == [2, 0]
    tiers = (ShareTier(own_words=1, share=MessageShare(1.0, 0.0)), ShareTier(0, CONTEXT_LED))
    assert rare_share(["球拍"], {"球拍": 1}, 100, tiers) == MessageShare(1.0, 0.0)
    assert rare_share(["球拍"], {"球拍": 50}, 100, tiers) == CONTEXT_LED


def test_the_setting_takes_rare() -> None:
    assert MemorySettings(memory_query_message_weight="rare").memory_query_message_weight == "rare"


@pytest.mark.parametrize(
    ("frequency", "rare"), [(0, False), (1, True), (2, True), (3, False), (8, False)]
)
def test_with_a_bound_in_turns_a_rare_term_points_at_one_memory(frequency: int, rare: bool) -> None:
    # MEMORY_RARE_TERM_TURNS=2: in a 1,000-turn chat a term in 8 turns is no longer rare.
    assert is_rare(frequency, 1000, most=2) is rare
    terms = ["想买", "球拍"]
    share = rare_share(terms, {"想买": 1, "球拍": frequency}, 1000, most=2)
    assert share == (MESSAGE_FIRST if rare else CONTEXT_LED)


def test_the_bound_in_turns_is_a_setting() -> None:
    assert MemorySettings().memory_rare_term_turns == 0  # the N ** 0.3 bound
    assert MemorySettings(memory_rare_term_turns="2").memory_rare_term_turns == 2
    with pytest.raises(ValueError):
        MemorySettings(memory_rare_term_turns=-1)


async def test_the_store_counts_a_terms_live_turns_of_this_session_up_to_now(memory_factory):  # type: ignore[no-untyped-def]
    memory = await memory_factory()
    now = datetime(2026, 12, 5, tzinfo=timezone.utc)
    day = timedelta(days=1)
    await memory.add_dialogues(
        [
            said(1, "我想买一支羽毛球拍", now - 3 * day),
            said(1, "球拍的线断了", now - 2 * day),
            said(1, "明天再去买球拍", now + day),  # said after `now`: not counted
            said(2, "球拍球拍", now - day),  # another user's session
        ]
    )
    store = memory.database.store(PgRecallStore)
    scope = RecallScope(generate_session_key(1, None), None)
    found = await store.term_frequencies(scope, ["球拍", "想买", "来着", "it's"], now)
    assert found == {"球拍": 2, "想买": 1, "来着": 0, "it's": 0}
    assert await store.term_frequencies(scope, [], now) == {}
