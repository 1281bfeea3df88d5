"""Time expressions in queries map to the right ``[start, end)`` in the configured timezone."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from memory_core.lang.timerange import analyse_query, parse_time_range, referred_range

SH = ZoneInfo("Asia/Shanghai")
# Monday 2024-01-01 00:30 in Shanghai: yesterday, last week and last month are all in 2023.
NEW_YEAR = datetime(2024, 1, 1, 0, 30, tzinfo=SH)
# Sunday 2024-03-10 15:00: a weekend day, mid-month.
SUNDAY = datetime(2024, 3, 10, 15, 0, tzinfo=SH)


def day(y: int, m: int, d: int, h: int = 0, minute: int = 0) -> datetime:
    return datetime(y, m, d, h, minute, tzinfo=SH)


def span(text: str, now: datetime, tz=SH) -> tuple[datetime, datetime]:
    found = parse_time_range(text, now, tz)
    assert found is not None, text
    return found.start, found.end


NEW_YEAR_CASES = {
    "昨天": (day(2023, 12, 31), day(2024, 1, 1)),
    "yesterday": (day(2023, 12, 31), day(2024, 1, 1)),
    "前天": (day(2023, 12, 30), day(2023, 12, 31)),
    "今天": (day(2024, 1, 1), day(2024, 1, 2)),
    "三天前": (day(2023, 12, 29), day(2023, 12, 30)),
    "3天前": (day(2023, 12, 29), day(2023, 12, 30)),
    "3 days ago": (day(2023, 12, 29), day(2023, 12, 30)),
    "十五天前": (day(2023, 12, 17), day(2023, 12, 18)),
    "上周": (day(2023, 12, 25), day(2024, 1, 1)),
    "上个星期": (day(2023, 12, 25), day(2024, 1, 1)),
    "last week": (day(2023, 12, 25), day(2024, 1, 1)),
    "这周": (day(2024, 1, 1), day(2024, 1, 8)),
    "本周": (day(2024, 1, 1), day(2024, 1, 8)),
    "上周三": (day(2023, 12, 27), day(2023, 12, 28)),
    "上星期天": (day(2023, 12, 31), day(2024, 1, 1)),
    "周末": (day(2023, 12, 30), day(2024, 1, 1)),
    "上周末": (day(2023, 12, 30), day(2024, 1, 1)),
    "上个月": (day(2023, 12, 1), day(2024, 1, 1)),
    "上月": (day(2023, 12, 1), day(2024, 1, 1)),
    "last month": (day(2023, 12, 1), day(2024, 1, 1)),
    "上上个月": (day(2023, 11, 1), day(2023, 12, 1)),
    "3个月前": (day(2023, 10, 1), day(2023, 11, 1)),
    "这个月": (day(2024, 1, 1), day(2024, 2, 1)),
    "去年": (day(2023, 1, 1), day(2024, 1, 1)),
    "last year": (day(2023, 1, 1), day(2024, 1, 1)),
    "前年": (day(2022, 1, 1), day(2023, 1, 1)),
    "2024-01-16": (day(2024, 1, 16), day(2024, 1, 17)),
    "2023年12月5日": (day(2023, 12, 5), day(2023, 12, 6)),
    # No year given and still to come this year: last year's.
    "1月16日": (day(2023, 1, 16), day(2023, 1, 17)),
    "1/16": (day(2023, 1, 16), day(2023, 1, 17)),
    "12月31号": (day(2023, 12, 31), day(2024, 1, 1)),
    "jan 16": (day(2023, 1, 16), day(2023, 1, 17)),
    "12月份": (day(2023, 12, 1), day(2024, 1, 1)),
    "昨天晚上": (day(2023, 12, 31, 18), day(2024, 1, 1)),
    "5小时前": (day(2023, 12, 31, 18, 15), day(2023, 12, 31, 20, 45)),
    "2 hours ago": (day(2023, 12, 31, 21, 30), day(2023, 12, 31, 23, 30)),
}


@pytest.mark.parametrize("text", list(NEW_YEAR_CASES))
def test_expression_maps_to_its_range_across_the_year_boundary(text):
    assert span(text, NEW_YEAR) == NEW_YEAR_CASES[text]


SUNDAY_CASES = {
    "昨天": (day(2024, 3, 9), day(2024, 3, 10)),
    # On a weekend day, 周末 is this weekend; 上周末 is the one before.
    "周末": (day(2024, 3, 9), day(2024, 3, 11)),
    "这周末": (day(2024, 3, 9), day(2024, 3, 11)),
    "上周末": (day(2024, 3, 2), day(2024, 3, 4)),
    "last weekend": (day(2024, 3, 2), day(2024, 3, 4)),
    "上周": (day(2024, 2, 26), day(2024, 3, 4)),
    "上周三": (day(2024, 2, 28), day(2024, 2, 29)),
    "周三": (day(2024, 3, 6), day(2024, 3, 7)),
    "星期天": (day(2024, 3, 10), day(2024, 3, 11)),
    "last friday": (day(2024, 3, 8), day(2024, 3, 9)),
    # A leap year: February has 29 days.
    "上个月": (day(2024, 2, 1), day(2024, 3, 1)),
    "十天前": (day(2024, 2, 29), day(2024, 3, 1)),
    "最近7天": (day(2024, 3, 4), SUNDAY + timedelta(seconds=1)),
    "two weeks ago": (day(2024, 2, 19), day(2024, 2, 26)),
}


@pytest.mark.parametrize("text", list(SUNDAY_CASES))
def test_expression_maps_to_its_range_on_a_sunday_in_a_leap_year(text):
    assert span(text, SUNDAY) == SUNDAY_CASES[text]


def test_just_now_is_a_recent_range_ending_at_now():
    for text in ("刚才", "刚刚", "just now"):
        found = parse_time_range(f"{text}说的链接是什么", NEW_YEAR, SH)
        assert found is not None and found.recent
        assert found.start == NEW_YEAR - timedelta(hours=2)
        assert NEW_YEAR in found


def test_ranges_follow_the_configured_timezone_not_utc():
    # 2023-12-31 16:30 UTC is already 2024-01-01 00:30 in Shanghai, still 2023-12-31 in UTC.
    utc_now = NEW_YEAR.astimezone(timezone.utc)
    assert span("昨天", utc_now, SH) == (day(2023, 12, 31), day(2024, 1, 1))
    assert span("昨天", utc_now, timezone.utc) == (
        datetime(2023, 12, 30, tzinfo=timezone.utc),
        datetime(2023, 12, 31, tzinfo=timezone.utc),
    )
    new_york = ZoneInfo("America/New_York")
    start, end = span("today", utc_now, new_york)
    assert (start, end) == (
        datetime(2023, 12, 31, tzinfo=new_york),
        datetime(2024, 1, 1, tzinfo=new_york),
    )


def test_expressions_inside_sentences_are_found_and_removed_from_the_rest():
    query = analyse_query("上周小明说的那个餐厅叫什么", NEW_YEAR, SH)
    assert query is not None
    assert (query.range.start, query.range.end) == NEW_YEAR_CASES["上周"]
    assert query.range.expression == "上周"
    assert "小明" in query.rest and "上周" not in query.rest
    assert not query.time_only


@pytest.mark.parametrize(
    "text", ["昨天我们聊了什么", "上周三说了啥", "what did we talk about yesterday", "刚才说了什么"]
)
def test_a_question_about_nothing_but_a_time_is_time_only(text):
    query = analyse_query(text, NEW_YEAR, SH)
    assert query is not None and query.time_only


@pytest.mark.parametrize(
    "text",
    ["我的订单号是多少", "一周三次健身", "晚上月亮很圆", "ORD123456 到了吗", "", "2月30日"],
)
def test_text_without_a_time_expression_gives_none(text):
    assert parse_time_range(text, NEW_YEAR, SH) is None


def test_naive_now_is_refused():
    with pytest.raises(ValueError):
        parse_time_range("昨天", datetime(2024, 1, 1), SH)


# Monday 2024-01-15 09:00: plans said then, and the day each talks about.
MONDAY = datetime(2024, 1, 15, 9, 0, tzinfo=SH)
PLAN_CASES = {
    "我明天上午十点要去体检": (day(2024, 1, 16, 5), day(2024, 1, 16, 12)),
    "后天交报告": (day(2024, 1, 17), day(2024, 1, 18)),
    "大后天回老家": (day(2024, 1, 18), day(2024, 1, 19)),
    "三天后出发": (day(2024, 1, 18), day(2024, 1, 19)),
    "下周三开会": (day(2024, 1, 24), day(2024, 1, 25)),
    "下个星期要考试": (day(2024, 1, 22), day(2024, 1, 29)),
    "see you tomorrow evening": (day(2024, 1, 16, 18), day(2024, 1, 17)),
    "next friday is her birthday": (day(2024, 1, 19), day(2024, 1, 20)),
    "next monday": (day(2024, 1, 22), day(2024, 1, 23)),
    "我昨天去了医院": (day(2024, 1, 14), day(2024, 1, 15)),
}


@pytest.mark.parametrize("text", list(PLAN_CASES))
def test_a_stored_turn_refers_to_the_day_it_talks_about(text):
    found = referred_range(text, MONDAY, SH)
    assert found is not None, text
    assert (found.start, found.end) == PLAN_CASES[text]


@pytest.mark.parametrize(
    "text", ["刚才吃了饭", "去年夏天去了海边", "这个月好忙", "看一下周报", "你好"]
)
def test_a_turn_refers_to_nothing_for_just_now_wide_spans_or_no_time(text):
    assert referred_range(text, MONDAY, SH) is None


def test_a_plan_word_in_a_question_is_not_a_range_of_its_own():
    # Plans are found through the day they were made for (a stored turn's reference), while
    # a pasted conversation's "明天见" must not make recall look at a day nothing was said on.
    assert analyse_query("明天见，我明天要干嘛", MONDAY, SH) is None
