"""MEMORY_QUERY_MESSAGE_WEIGHT=auto: the message's share by how much it says on its own
(``memory_core.recall.message_share``)."""

from __future__ import annotations

import pytest

from memory_core.recall.message_share import (
    MESSAGE_SHARE_TIERS,
    MessageShare,
    ShareTier,
    message_share,
    own_words,
)
from memory_core.settings import MemorySettings

MESSAGE_FIRST = MessageShare(message_weight=0.5, context_term_weight=0.7)
CONTEXT_LED = MessageShare(message_weight=0.0, context_term_weight=1.0)
OFFICE = ["今天又加班到很晚，累死了", "楼下那家奶茶店今天排了好长的队"]


def test_a_message_about_something_its_context_never_named_gets_its_share() -> None:
    # 我说想买 / 球拍叫 / 来着: three words, none of them in the lines about work and milk tea.
    message = "上次我说想买的那个球拍叫什么来着？"
    assert own_words(message, OFFICE) == 3
    assert message_share(message, OFFICE) == MESSAGE_FIRST


def test_an_elliptic_message_keeps_the_context_led_query() -> None:
    # "the show?" says one word, and the earlier line already has it.
    earlier = ["I finally watched the show you told me about", "it was so good"]
    assert own_words("the show?", earlier) == 0
    assert message_share("the show?", earlier) == CONTEXT_LED


def test_words_the_earlier_lines_already_have_are_not_the_messages_own() -> None:
    earlier = ["we talked about badminton rackets yesterday"]
    assert own_words("which badminton racket again?", earlier) == 1  # "racket" (not "rackets")
    assert message_share("which badminton racket again?", earlier) == CONTEXT_LED
    assert message_share("which badminton racket again?", []) == MESSAGE_FIRST


def test_one_word_of_its_own_is_not_enough_and_two_are() -> None:
    assert message_share("really?", ["I saw a cat today"]) == CONTEXT_LED
    assert message_share("my guitar lessons?", ["I saw a cat today"]) == MESSAGE_FIRST


def test_the_tiers_are_data_read_highest_first() -> None:
    assert [tier.own_words for tier in MESSAGE_SHARE_TIERS] == [2, 0]
    tiers = (ShareTier(own_words=1, share=MessageShare(1.0, 0.0)), ShareTier(0, CONTEXT_LED))
    assert message_share("really?", ["I saw a cat"], tiers) == MessageShare(1.0, 0.0)
    assert message_share("the cat?", ["I saw a cat"], tiers) == CONTEXT_LED


@pytest.mark.parametrize(("value", "read"), [("auto", "auto"), ("0.5", 0.5), ("0", 0.0)])
def test_the_setting_takes_auto_or_a_share(value: str, read: object) -> None:
    assert MemorySettings(memory_query_message_weight=value).memory_query_message_weight == read


@pytest.mark.parametrize("value", ["1.5", "-0.1", "sometimes"])
def test_the_setting_refuses_anything_else(value: str) -> None:
    with pytest.raises(ValueError):
        MemorySettings(memory_query_message_weight=value)
