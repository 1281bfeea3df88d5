"""The console read at a glance, in a real headless Chromium against the real bot with a QQ
client (a OneBot peer) connected: the headline figures and their numbers, charts with whole
numbers on their axes, readable labels, a date range fitted to the data and a text for an empty
chart, time and name cells that never wrap, content before navigation on a phone, and a meaning
search that says how much it found above its relevance cut-off.

Screenshots at 1366 and 390 px go to ``test-artifacts/console/`` (``overview-*``,
``sessions-*``, ``search-*``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from memory_core import open_memory
from memory_core.settings import BUNDLED_MODEL_RECALL_FLOOR, MemorySettings
from tests.core.console.test_console import store_chat
from tests.plugin.console_bot import ALICE, ConsoleBot
from tests.plugin.events import SELF_ID
from tests.plugin.test_console_browser import (
    CHROMEDRIVER,
    CHROMIUM,
    chromium,
    full_shot,
    go,
    log_in,
    text_of,
)
from tests.plugin.wire import OneBotPeer

WIDE, PHONE = (1366, 900), (390, 844)
NEWCOMER, NEW_GROUP = 3003, 7007
SAID_TODAY = ("大家好，我是新来的", "周末有人去爬山吗", "我带了相机")
SHANGHAI = ZoneInfo("Asia/Shanghai")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs Debian's chromium and chromium-driver (.ci/run installs them)",
)


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
async def connected(
    console_wire: ConsoleBot, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[OneBotPeer]:
    """A QQ client connected to the bot, and ``SAID_TODAY`` stored (through the core, as the
    seed is) in a group a minute ago: the only turns of today."""
    memory = await open_memory(
        MemorySettings(memory_dsn=console_wire.dsn, memory_data_dir=tmp_path_factory.mktemp("d")),
        maintenance_interval=None,
    )
    try:
        rows = [(NEWCOMER, NEW_GROUP, "user", text, "新人") for text in SAID_TODAY]
        await store_chat(memory, rows, datetime.now(timezone.utc) - timedelta(minutes=5))
    finally:
        await memory.aclose()
    peer = await OneBotPeer.connect(console_wire.bot.ws_url, console_wire.bot.token)
    yield peer
    await peer.close()


def figure(browser: WebDriver, key: str) -> tuple[str, str]:
    element = browser.find_element(By.ID, f"figure-{key}")
    value = element.find_element(By.CSS_SELECTOR, ".value").text
    return value, element.find_element(By.CSS_SELECTOR, ".sub").text


async def test_headline_figures_count_today_memories_sessions_accounts_and_whats_wrong(
    console_wire: ConsoleBot, connected: OneBotPeer, browser: WebDriver
):
    browser.set_window_size(*WIDE)
    await log_in(browser, console_wire)

    assert figure(browser, "today") == ("3", "用户 3 · 机器人 0")  # seeded turns are older
    assert figure(browser, "memories") == ("2", "事实 2 · 偏好 0 · 摘要 0")
    assert figure(browser, "sessions")[0] == "5"  # four seeded, the newcomer's in the group
    assert figure(browser, "accounts") == ("1", str(SELF_ID))
    assert figure(browser, "uptime")[0].endswith(("分钟", "分", "小时"))
    assert figure(browser, "state") == ("1 项异常", "大模型未配置")  # started without a model
    state = browser.find_element(By.ID, "figure-state")
    assert "warn" in (state.get_attribute("class") or "")
    full_shot(browser, "overview-1366", WIDE)
    full_shot(browser, "overview-390", PHONE)


Y_LABELS = 'svg text[text-anchor="end"]'  # the numbers up the axis


def chart(browser: WebDriver, caption: str) -> Any:
    return next(
        f for f in browser.find_elements(By.CSS_SELECTOR, "figure.chart") if caption in f.text
    )


async def test_charts_have_whole_number_axes_readable_labels_and_the_datas_own_range(
    console_wire: ConsoleBot, connected: OneBotPeer, browser: WebDriver
):
    await go(browser, f"{console_wire.base}/")
    ticks = [t.text for t in browser.find_elements(By.CSS_SELECTOR, Y_LABELS)]
    assert ticks and all(t.isdigit() for t in ticks), ticks  # never "0.50"
    messages = chart(browser, "每天的消息")
    assert [t.text for t in messages.find_elements(By.CSS_SELECTOR, Y_LABELS)] == [
        "0",
        "2",
        "4",
        "6",
    ]  # fmt: skip (6 seeded turns two days ago)

    # Seeded two days ago, said today: the range is the last week, not thirty days.
    today = datetime.now(SHANGHAI).date()
    first = today - timedelta(days=6)
    assert f"{first:%Y-%m-%d} 至 {today:%Y-%m-%d}，共 7 天" in text_of(browser)
    days = [t.text for t in messages.find_elements(By.CSS_SELECTOR, "text.day")]
    assert days[0] == f"{first:%m-%d}" and days[-1] == f"{today:%m-%d}" and len(days) == 7

    purged = chart(browser, "每天清理的过期记忆")  # nothing has expired
    assert "暂无数据" in purged.text and not purged.find_elements(By.CSS_SELECTOR, "rect")

    for size in (WIDE, PHONE):
        browser.set_window_size(*size)
        # The size a label is drawn at on the screen: its font size times the SVG's scale.
        drawn = browser.execute_script(
            "return [...document.querySelectorAll('figure.chart svg text')].map(t =>"
            " parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a)"
        )
        assert drawn and min(drawn) >= 11, (size, min(drawn))


# Every text node of the time and name cells laid out on one line: one line box each.
LINES_OF = """
return [...document.querySelectorAll(arguments[0])].map(cell => {
  const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
  let most = 0;
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    if (!node.textContent.trim()) continue;
    const range = document.createRange();
    range.selectNodeContents(node);
    const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
    most = Math.max(most, tops.size);
  }
  return [cell.innerText, getComputedStyle(cell).whiteSpace, most];
});
"""


SESSION_CELLS = ", ".join(f'tr.session td[data-label="{k}"]' for k in ("会话", "类型", "最近"))
TURN_CELLS = ", ".join(f'tr.turn td[data-label="{k}"]' for k in ("时间", "说话人", "评分", "过期"))


def cells(browser: WebDriver, selector: str) -> list[tuple[str, str, int]]:
    return [tuple(c) for c in browser.execute_script(LINES_OF, selector)]


async def test_time_and_name_cells_never_wrap_at_desktop_or_phone_width(
    console_wire: ConsoleBot, connected: OneBotPeer, browser: WebDriver
):
    pages = {
        "sessions": (f"{console_wire.base}/sessions", SESSION_CELLS),
        "session": (f"{console_wire.base}/session?key={ALICE}", TURN_CELLS),
    }
    for name, (url, selector) in pages.items():
        for size in (WIDE, PHONE):
            browser.set_window_size(*size)
            await go(browser, url)
            found = cells(browser, selector)
            assert len(found) >= 4, (name, found)
            assert all(space == "nowrap" and lines == 1 for _, space, lines in found), (
                name,
                size,
                [f for f in found if f[1] != "nowrap" or f[2] != 1],
            )
            full_shot(browser, f"{name}-{size[0]}", size)
    speakers = [c[0] for c in cells(browser, 'tr.turn td[data-label="说话人"]')]
    assert "机器人" in speakers  # the cell that wrapped as 机/器/人


NAV_LINK = 'a[href$="/memory/bin"]'  # a link of the navigation


async def test_a_phone_gets_the_content_first_and_a_wide_screen_the_navigation_on_top(
    console_wire: ConsoleBot, connected: OneBotPeer, browser: WebDriver
):
    top_of = "return document.querySelector(arguments[0]).getBoundingClientRect().top"
    for size, content_first in ((PHONE, True), (WIDE, False)):
        browser.set_window_size(*size)
        await go(browser, f"{console_wire.base}/sessions")
        main, nav = (browser.execute_script(top_of, s) for s in ("main", NAV_LINK))
        assert (main < nav) is content_first, (size, main, nav)
    browser.set_window_size(*PHONE)
    await go(browser, f"{console_wire.base}/sessions")
    # The bar's 菜单 is a link to the navigation below the content.
    menu = browser.find_element(By.CSS_SELECTOR, "header a.menu")
    assert (menu.get_attribute("href") or "").endswith("#nav") and menu.is_displayed()


async def test_meaning_search_counts_its_hits_and_leaves_out_what_is_below_the_cut_off(
    console_wire: ConsoleBot, connected: OneBotPeer, browser: WebDriver
):
    floor = BUNDLED_MODEL_RECALL_FLOOR  # the bot runs the local model
    browser.set_window_size(*WIDE)
    base = f"{console_wire.base}/session?key={ALICE}&mode=meaning"

    await go(browser, f"{base}&q=骨头")
    hits = browser.find_element(By.CSS_SELECTOR, "p.hits").text
    assert hits == f"找到 1 条（相关度 ≥ {floor:.2f}）", hits
    turns = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "tr.turn")]
    assert len(turns) == 1 and "旺财，很喜欢吃骨头" in turns[0]  # not 杭州, not 旺财真可爱
    full_shot(browser, "search-1366", WIDE)
    full_shot(browser, "search-390", PHONE)

    browser.set_window_size(*WIDE)
    await go(browser, f"{base}&q=潜水艇")  # never said
    assert browser.find_element(By.CSS_SELECTOR, "p.hits").text == (
        f"没有找到相关的对话（相关度 ≥ {floor:.2f}）。"
    )
    assert not browser.find_elements(By.CSS_SELECTOR, "tr.turn")

    await go(browser, f"{console_wire.base}/session?key={ALICE}&q=旺财")  # keywords: counted
    assert browser.find_element(By.CSS_SELECTOR, "p.hits").text == "找到 2 条"
