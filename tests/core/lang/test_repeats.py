"""The test a 撤回 and a delete use to find the bot's later replies that repeat a message."""

from __future__ import annotations

import pytest

from memory_core.lang.repeats import Repeats, repeats


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        ("好的，记住啦：你的银行卡密码是778899。", "我的银行卡密码是778899，别告诉别人"),
        ("好的，记住了你的银行卡密码", "我的银行卡密码是 6543 2109"),
        ("你对花生过敏，要小心", "我对花生过敏"),
        ("ＯＫ，你的取件码是 ８８１２３", "取件码88123"),  # full-width forms fold
        ("Your password is hunter2, right?", "my password is hunter2"),
        ("好，叫小明对吧", "小明"),  # a short text: all of it
        ("你说取件码是 88123", "[图片] 取件码88123"),  # the words beside a picture still count
    ],
)
def test_a_reply_holding_a_run_of_the_text_repeats_it(reply, said):
    assert repeats(reply, said)


@pytest.mark.parametrize(
    ("reply", "said"),
    [
        ("好的，这件事我记下了", "帮我记下这件事"),  # four characters in common
        ("银行卡丢了要尽快挂失", "我的银行卡密码是778899"),
        ("原来你叫小明", "我叫小明"),  # short: only all of it counts
        ("The station is near", "information please"),  # "ation" says little
        ("好", "好"),  # one character is never found repeated
        ("ok", "ok"),
        ("", "我对花生过敏"),
        ("这张图片里的猫真可爱", "[图片]"),  # a placeholder is not what the person said
        ("你回复的是小明说的周末去爬山", "[回复 小明: 周末去爬山吗] 好"),
    ],
)
def test_a_reply_sharing_less_does_not_repeat_it(reply, said):
    assert not repeats(reply, said)


def test_nothing_worth_finding_makes_an_empty_matcher():
    assert not Repeats(["好", " ", "！！"])
    assert Repeats(["好", "我对花生过敏"]).found_in("你对花生过敏")
