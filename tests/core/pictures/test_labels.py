"""How a picture's text is written into its turn, and the per-minute budget (no database)."""

from __future__ import annotations

from memory_core.pictures.reader import MinuteBudget
from memory_core.pictures.text import derived_label, picture_text, with_labels


def test_the_messages_own_pictures_get_their_labels_not_a_quoted_ones():
    content = "[回复 小明: [图片]] 看这两张[图片]和[动画表情]"
    labels = [("[图片]", "[图片：文字 A]"), ("[动画表情]", "[动画表情：文字 B]")]
    assert (
        with_labels(content, labels)
        == "[回复 小明: [图片]] 看这两张[图片：文字 A]和[动画表情：文字 B]"
    )


def test_no_change_or_an_edited_text_gives_none():
    assert with_labels("[图片]", [("[图片]", "[图片]")]) is None  # nothing was read
    assert with_labels("改过的文字", [("[图片]", "[图片：文字 A]")]) is None


def test_a_pictures_text_is_one_line_without_brackets_and_capped():
    assert picture_text(["第一行  文字", "", "[第二行]"], 100) == "第一行 文字 ［第二行］"
    assert picture_text(["一二三四五六七八九十"], 5) == "一二三四…"
    assert derived_label("[图片]", "取件码8848", "一张快递通知") == (
        "[图片：一张快递通知；文字 取件码8848]"
    )
    assert derived_label("[图片]", "") == "[图片]"


def test_the_budget_allows_so_many_a_minute():
    now = [0.0]
    budget = MinuteBudget(2, clock=lambda: now[0])
    assert budget.take() and budget.take() and not budget.take()
    now[0] = 59.9
    assert not budget.take()
    now[0] = 60.0
    assert budget.take()
