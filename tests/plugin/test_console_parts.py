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
