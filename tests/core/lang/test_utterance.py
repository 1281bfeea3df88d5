"""Which lines carry no fact of their own (``lang.utterance``): questions, the bot's "I don't
know", the bot's restatement of a person's statement."""

from __future__ import annotations

import pytest

from memory_core.lang.utterance import Kind, echoes, is_non_answer, is_question, kind_of


@pytest.mark.parametrize(
    "text",
    [
        "周会几点？",
        "周会改到几点了？",
        "你还记得我的取件码吗",
        "她叫什么名字",
        "What time is the meeting?",
        "Hey Mel, how was your weekend? Did you go camping?",
        "what is my locker code",
    ],
)
def test_a_line_that_only_asks_is_a_question(text: str) -> None:
    assert is_question(text)


@pytest.mark.parametrize(
    "text",
    [
        "周五的周会改到下午三点了",
        "我明天去北京出差，你说带什么？",  # it states something too
        "我什么都不想吃",  # 什么 before 都 asks nothing
        "谁也不知道",
        "I went camping last week, how about you?",
        "取件码是4-2-1187",
        "嗯",
    ],
)
def test_a_line_that_states_something_is_no_question(text: str) -> None:
    assert not is_question(text)


def test_the_bots_not_knowing_is_a_non_answer_in_either_language() -> None:
    for text in ("这个我不记得了", "抱歉，我没有找到相关的记录", "I don't remember that, sorry."):
        assert is_non_answer(text) and kind_of(text, "assistant") is Kind.NON_ANSWER
    assert not is_non_answer("周会改到下午三点了")
    # A person saying they do not know states something about themselves.
    assert kind_of("我不知道他几点来", "user") is Kind.STATEMENT


def test_an_echo_restates_a_persons_statement_beyond_its_acknowledgement() -> None:
    said = "对了跟你说一下，公司新换了门禁，我的工位密码改成7351了，别告诉别人"
    assert echoes("好的，记住啦：你的工位密码是7351", said)
    assert echoes("好的，记住啦：周五的周会改到下午三点了", "周五的周会改到下午三点了")
    assert not echoes("咪咪这个名字真可爱！", "我的猫叫咪咪")
    assert kind_of("好的，记住啦：你的工位密码是7351", "assistant", [said]) is Kind.ECHO
    # Only the bot echoes; a person repeating a line states it again.
    assert kind_of("我的工位密码改成7351了", "user", [said]) is Kind.STATEMENT


def test_an_answer_in_the_words_of_the_question_is_no_echo() -> None:
    kind = kind_of("周会改到下午三点了", "assistant", ["周会改到几点了？"])
    assert kind is Kind.STATEMENT
