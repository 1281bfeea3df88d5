"""The console's pure parts: the login limiter's window, the SVG charts, the HTML escaping."""

from __future__ import annotations

import re
from typing import Any


def test_failed_logins_block_a_client_for_the_window_then_let_it_try_again(plugin: Any):
    from nonebot_plugin_temporal_memory.console.access import (
        LOGIN_FAILURES_PER_CLIENT,
        LOGIN_WINDOW,
        LoginLimiter,
    )

    now = [1000.0]
    limiter = LoginLimiter(clock=lambda: now[0])
    for _ in range(LOGIN_FAILURES_PER_CLIENT):
        assert not limiter.blocked("10.0.0.1")
        limiter.failed("10.0.0.1")

    assert limiter.blocked("10.0.0.1")
    assert not limiter.blocked("10.0.0.2")  # another address still may try
    now[0] += LOGIN_WINDOW + 1
    assert not limiter.blocked("10.0.0.1")


def test_failures_spread_over_many_addresses_never_lock_out_another(plugin: Any):
    from nonebot_plugin_temporal_memory.console.access import LoginLimiter

    limiter = LoginLimiter(clock=lambda: 1000.0)
    for i in range(200):
        limiter.failed(f"10.0.{i // 4}.{i % 4}")  # four wrong tokens from each of 50 addresses
    assert not limiter.blocked("192.168.1.20")  # the operator's own address logs in


def test_bars_are_scaled_to_a_round_axis_and_stacked(plugin: Any):
    from nonebot_plugin_temporal_memory.console.charts import BOTTOM, HEIGHT, TOP, Series, bar_chart

    svg = str(bar_chart("图", ["a", "b"], [Series("甲", (4, 10)), Series("乙", (6, 0))]))

    heights = [float(h) for h in re.findall(r'<rect [^>]*height="([\d.]+)"', svg)]
    plot = HEIGHT - TOP - BOTTOM
    assert heights == [plot * 0.4, plot * 0.6, plot * 1.0]  # axis top 10: a = 4 + 6, b = 10
    assert ">10</text>" in svg and "<title>a 乙：6</title>" in svg


def test_chart_text_and_page_values_are_escaped(plugin: Any):
    from nonebot_plugin_temporal_memory.console.charts import Series, bar_chart
    from nonebot_plugin_temporal_memory.console.markup import Markup, render

    svg = str(bar_chart("<b>", ["<i>"], [Series("<script>", (1,))]))
    assert "<script>" not in svg and "<b>" not in svg and "&lt;script&gt;" in svg
    page = render("<p>{x}{y}</p>", x='"><img src=x>', y=Markup("<em>ok</em>"))
    assert page == "<p>&quot;&gt;&lt;img src=x&gt;<em>ok</em></p>"


def test_count_axes_step_by_whole_numbers_and_reach_the_largest_value(plugin: Any):
    from nonebot_plugin_temporal_memory.console.charts import MAX_INTERVALS, count_ticks

    assert count_ticks(0) == [0, 1]
    assert count_ticks(1) == [0, 1]  # once 0, 0.50, 1
    assert count_ticks(3) == [0, 1, 2, 3]
    assert count_ticks(7) == [0, 2, 4, 6, 8]
    assert count_ticks(168) == [0, 50, 100, 150, 200]
    for largest in range(0, 2001, 7):
        ticks = count_ticks(largest)
        assert all(isinstance(t, int) for t in ticks) and ticks[-1] >= largest
        assert len(ticks) - 1 <= MAX_INTERVALS


def test_a_chart_of_one_message_has_no_fractional_tick_and_an_empty_one_says_so(plugin: Any):
    from nonebot_plugin_temporal_memory.console.charts import EMPTY, Series, bar_chart

    one = str(bar_chart("图", ["a", "b"], [Series("甲", (1, 0))]))
    ticks = re.findall(r'class="axis tick"[^>]*>([^<]*)</text>', one)
    assert ticks == ["0", "1"] and "viewBox" not in one  # text is never scaled down
    empty = str(bar_chart("图", ["a", "b"], [Series("甲", (0, 0))]))
    assert EMPTY in empty and "<rect" not in empty and "tick" not in empty


def test_the_headline_names_each_degraded_part_and_is_green_when_none_is(plugin: Any):
    from datetime import date, datetime, timedelta, timezone
    from zoneinfo import ZoneInfo

    from memory_core.console import DailyFigures, Headline
    from memory_core.console.dashboard import Connection, DatabaseState
    from nonebot_plugin_temporal_memory.console.admin_views import BotStatus, headline_row
    from nonebot_plugin_temporal_memory.console.views import Page

    page = Page(tz=ZoneInfo("Asia/Shanghai"), csrf="x")
    today = DailyFigures((date(2026, 12, 2),), (8,), (4,), {})
    now = datetime(2026, 12, 2, 3, tzinfo=timezone.utc)

    def status(database: DatabaseState, model: str | None, **kw: Any) -> BotStatus:
        connection = Connection(database=database, embedded=True, chat_model=model, uptime=None)
        return BotStatus(("10001",), connection, now - timedelta(hours=26), now, **kw)

    def state(headline: Headline, *args: Any, **kw: Any) -> str:
        html = str(headline_row(page, headline, today, status(*args, **kw)))
        return re.sub(r"<[^>]+>", " ", html.split('id="figure-state"')[1])

    well = Headline(12, 3, {"facts": 2}, pending_embeddings=0, extraction_failed_today=0)
    assert "正常" in state(well, DatabaseState.CONNECTED, "qwen")
    ill = Headline(12, 3, {}, 5, 2, embedder_failing=True)
    said = state(ill, DatabaseState.DEGRADED, "qwen", chat_failing=True)
    for part in ("数据库写入受阻", "向量服务连续出错", "向量待补 5 条", "大模型连续出错",
                 "今天提炼失败 2 次", "5 项异常"):  # fmt: skip
        assert part in said, said
    down = state(well, DatabaseState.DOWN, None)
    assert "数据库连不上" in down and "大模型未配置" in down

    whole = str(headline_row(page, well, today, status(DatabaseState.CONNECTED, "qwen")))
    assert "1 天 2 小时" in whole and "用户 8 · 机器人 4" in whole
    assert "自 2026-12-01 09:00" in whole  # started 01:00 UTC, shown in MEMORY_TIMEZONE


def test_the_prompt_cache_chart_stacks_cached_and_uncached_tokens_and_names_the_share(plugin: Any):
    from nonebot_plugin_temporal_memory.console.admin_views import prompt_cache_chart

    svg = str(prompt_cache_chart(["a", "b"], [1000, 3000], [600, 1400]))
    assert "缓存命中 50.0%" in svg  # 2000 of 4000 tokens over the days shown
    assert "<title>a 缓存命中：600</title>" in svg and "<title>b 未命中：1600</title>" in svg
    assert "缓存命中 " not in str(prompt_cache_chart(["a"], [0], [0]))


def entry(action: str, kind: str, before: str | None = None, after: str | None = None) -> Any:
    from datetime import datetime, timezone

    from memory_core.console import AuditEntry

    at = datetime(2026, 12, 7, tzinfo=timezone.utc)
    return AuditEntry(1, at, "mcp:http", action, kind, 5, "6006:2002", before, after)


def test_audit_lines_are_chinese_for_old_english_entries_and_for_cleared_ones(plugin: Any):
    from nonebot_plugin_temporal_memory.console.log_views import actor_zh, chinese, said, what

    assert chinese("周会 → 2 turn(s), 0 fact(s)") == "「周会」→ 对话 2 条，事实 0 条"
    assert chinese("dialogues 1, facts 2") == "对话 1 条、事实 2 条"
    assert chinese("the whole chat") == "整个会话" and chinese("nothing") == "没有可删的"
    assert chinese("我的猫叫团子 → 3") == "「我的猫叫团子」→ 找到 3 个会话"
    assert chinese("我的猫叫团子") == "我的猫叫团子"  # a note's own text stays as it is
    assert str(said(entry("recall", "query", "周会", "对话 2 条，事实 0 条"))) == (
        "「周会」→ 对话 2 条，事实 0 条"
    )
    assert "已清除" in said(entry("edit", "turn"))  # forgotten: the entry says so, no text
    assert "回收站" in said(entry("delete", "turn"))
    assert "没有找到任何人" in said(entry("find", "people", None, "0"))
    assert what(entry("edit", "distilled")) == "修改提炼记忆 #5"
    assert actor_zh("mcp:http") == "MCP 智能体（http）"
    assert actor_zh("控制台@127.0.0.1") == "控制台（127.0.0.1）"


def test_a_text_read_off_a_picture_is_marked_without_an_emoji(plugin: Any):
    from nonebot_plugin_temporal_memory.console.derived import marked_text

    shown = str(marked_text("看这个 [图片：文字 周会改到周三]"))
    assert '<mark class="derived"' in shown and "[图片：文字 周会改到周三]" in shown
    assert not [c for c in shown if ord(c) > 0xFFFF]  # no font on a server draws 🖼
