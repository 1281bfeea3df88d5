"""The console in a real headless Chromium (Debian's chromium + chromium-driver, driven by
Selenium) against the real bot: log in, find a session, search, edit a fact and see the new
text in the recall debugger, delete and restore from the recycle bin, see the charts.

Screenshots of each step, at a desktop and a phone width, go to ``test-artifacts/console/``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from selenium import webdriver
from selenium.common.exceptions import TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

from tests.plugin.console_bot import (
    ALICE,
    ALICE_FACT,
    BOB,
    CONSOLE_TOKEN,
    GROUP,
    ConsoleBot,
)

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
DESKTOP, PHONE = (1280, 900), (390, 844)
EDITED_FACT = "用户养了一条柯基犬叫团子"

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs Debian's chromium and chromium-driver (.ci/run installs them)",
)


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    with chromium() as driver:
        yield driver


@contextlib.contextmanager
def chromium() -> Iterator[WebDriver]:
    """Headless Chromium through Debian's chromedriver, screenshots going to ``ARTIFACTS``."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--lang=zh-CN", f"--window-size={DESKTOP[0]},{DESKTOP[1]}"):  # fmt: skip
        options.add_argument(flag)
    # The driver is named, so Selenium Manager never tries to download one.
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.implicitly_wait(5)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


def full_shot(
    browser: WebDriver, name: str, size: tuple[int, int], *, first_screen: bool = False
) -> None:
    """The whole page as a screen of this width shows it (no scroll bar, as on a phone), or
    with ``first_screen`` only what a screen of exactly this size shows before any scroll."""
    browser.set_window_size(*size)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    shown = size[1] if first_screen else max(int(height), size[1])
    metrics = {"width": size[0], "height": shown, "deviceScaleFactor": 1}
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {**metrics, "mobile": False})
    try:
        data = browser.execute_cdp_cmd("Page.captureScreenshot", {"format": "png"})
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    (ARTIFACTS / f"{name}.png").write_bytes(base64.b64decode(data["data"]))


def shot(browser: WebDriver, name: str, size: tuple[int, int] = DESKTOP) -> None:
    browser.set_window_size(*size)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(size[0], min(max(int(height), size[1]), 4000))
    browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    browser.set_window_size(*DESKTOP)


async def go(browser: WebDriver, url: str) -> None:
    await asyncio.to_thread(browser.get, url)


async def click(element: WebElement) -> None:
    await asyncio.to_thread(element.click)


def text_of(browser: WebDriver) -> str:
    return browser.find_element(By.TAG_NAME, "body").text


async def submit(browser: WebDriver, button: WebElement, *, then: str) -> None:
    """Click a button that loads a page, and wait until that page's body shows ``then``."""
    await click(button)

    def shows(driver: WebDriver) -> bool:
        try:
            return then in driver.find_element(By.TAG_NAME, "body").text
        except WebDriverException:  # the old page went away between the two calls
            return False

    try:
        await asyncio.to_thread(WebDriverWait(browser, 15).until, shows)
    except TimeoutException:
        raise AssertionError(f"no {then!r} on {browser.current_url}:\n{text_of(browser)}") from None


async def log_in(browser: WebDriver, console_wire: ConsoleBot) -> None:
    await go(browser, f"{console_wire.base}/")
    assert "控制台令牌" in text_of(browser)
    shot(browser, "01-login", PHONE)
    browser.find_element(By.NAME, "token").send_keys(CONSOLE_TOKEN)
    await submit(
        browser, browser.find_element(By.CSS_SELECTOR, "form.login button"), then="今天的消息"
    )
    assert browser.find_element(By.TAG_NAME, "h1").text == "概览"


async def test_operator_logs_in_and_sees_the_charts(console_wire: ConsoleBot, browser: WebDriver):
    await log_in(browser, console_wire)

    charts = browser.find_elements(By.CSS_SELECTOR, "figure.chart svg")
    assert len(charts) >= 6
    latency = next(
        f for f in browser.find_elements(By.CSS_SELECTOR, "figure.chart") if "耗时" in f.text
    )
    assert "平均 168 ms" in latency.text  # (40 + 60 + 150 + 420) / 4, rounded
    assert len(latency.find_elements(By.CSS_SELECTOR, "rect.bar")) == 3  # one day, three bands
    bars = browser.find_elements(By.CSS_SELECTOR, "figure.chart svg rect.bar")
    assert bars, "the messages chart draws a bar for the seeded day"
    assert all(c.size["width"] > 200 and c.size["height"] > 50 for c in charts)
    shot(browser, "02-overview")
    shot(browser, "02-overview-phone", PHONE)


async def test_operator_finds_a_session_and_searches_it(
    console_wire: ConsoleBot, browser: WebDriver
):
    await go(browser, f"{console_wire.base}/sessions")
    group = browser.find_element(By.NAME, "group")
    group.send_keys(str(GROUP))
    await submit(browser, browser.find_element(By.CSS_SELECTOR, "form.filters button"), then="波波")
    listed = browser.find_elements(By.CSS_SELECTOR, "tr.session")
    assert len(listed) == 2 and "丽丽" in text_of(browser) and "阿丽" not in text_of(browser)

    await go(browser, f"{console_wire.base}/sessions?type=private&user={ALICE}")
    shot(browser, "03-sessions")
    await submit(browser, browser.find_element(By.LINK_TEXT, "阿丽"), then=ALICE_FACT)

    box = browser.find_element(By.NAME, "q")
    box.send_keys("骨头")
    await submit(
        browser,
        browser.find_element(By.CSS_SELECTOR, "form[role=search] button"),
        then="没有提炼出的记忆",
    )  # the fact says nothing of bones
    turns = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "tr.turn")]
    assert len(turns) == 1 and "旺财" in turns[0]
    assert "大黄" not in text_of(browser) and "狗粮" not in text_of(browser)
    shot(browser, "04-session-search")
    shot(browser, "04-session-search-phone", PHONE)


async def test_operator_edits_a_fact_and_the_debugger_uses_the_new_text(
    console_wire: ConsoleBot, browser: WebDriver
):
    await go(browser, f"{console_wire.base}/session?key={ALICE}")
    row = browser.find_element(By.CSS_SELECTOR, "tr.memory")
    await click(row.find_element(By.TAG_NAME, "summary"))
    full_shot(browser, "05-edit-open-1366", (1366, 768), first_screen=True)
    box = row.find_element(By.NAME, "text")
    box.clear()
    box.send_keys(EDITED_FACT)
    await submit(
        browser,
        row.find_element(By.CSS_SELECTOR, "details button"),
        then="已保存，并重新生成了向量",
    )
    assert EDITED_FACT in text_of(browser) and ALICE_FACT not in text_of(browser)

    await submit(
        browser,
        browser.find_element(By.LINK_TEXT, "在回忆调试中以此会话提问"),
        then="看看会想起什么",
    )
    browser.find_element(By.NAME, "message").send_keys("我的柯基犬叫什么名字")
    await submit(
        browser, browser.find_element(By.CSS_SELECTOR, "form.filters button"), then="最终提示词"
    )
    prompts = [p.text for p in browser.find_elements(By.CSS_SELECTOR, "pre.prompt")]
    # Found by its new embedding; the memory is in the last message, next to the question
    # (the system prompt stays the same for every message: the provider's prefix cache).
    assert prompts and EDITED_FACT in prompts[-1] and EDITED_FACT not in prompts[0]
    assert browser.find_elements(By.CSS_SELECTOR, "tr.candidate")
    shot(browser, "05-debugger")

    await go(browser, f"{console_wire.base}/audit")
    assert ALICE_FACT in text_of(browser) and EDITED_FACT in text_of(browser)
    shot(browser, "06-audit", PHONE)


async def test_operator_deletes_a_turn_and_restores_it_from_the_bin(
    console_wire: ConsoleBot, browser: WebDriver
):
    await go(browser, f"{console_wire.base}/session?key={ALICE}")
    target = next(r for r in browser.find_elements(By.CSS_SELECTOR, "tr.turn") if "杭州" in r.text)
    await submit(
        browser, target.find_element(By.CSS_SELECTOR, "button.danger"), then="已移入回收站"
    )
    assert "杭州" not in text_of(browser)

    await go(browser, f"{console_wire.base}/bin")
    binned = browser.find_elements(By.CSS_SELECTOR, "tr.binned")
    assert len(binned) == 1 and "杭州" in binned[0].text
    shot(browser, "07-bin")
    await submit(browser, binned[0].find_element(By.TAG_NAME, "button"), then="已恢复")
    assert "下周三我要去杭州出差" in text_of(browser)

    await go(browser, f"{console_wire.base}/bin")
    assert "回收站是空的" in text_of(browser)
    await go(browser, f"{console_wire.base}/settings")
    assert "LLM_API_KEY" in text_of(browser) and "test-key" not in text_of(browser)
    assert CONSOLE_TOKEN not in browser.page_source
    shot(browser, "08-settings")


def row_with(browser: WebDriver, selector: str, text: str) -> WebElement:
    return next(r for r in browser.find_elements(By.CSS_SELECTOR, selector) if text in r.text)


async def test_operator_pins_a_turn_and_a_fact_then_unpins_the_turn(
    console_wire: ConsoleBot, browser: WebDriver
):
    await go(browser, f"{console_wire.base}/session?key={ALICE}")
    turn = row_with(browser, "tr.turn", "杭州")
    await submit(browser, turn.find_element(By.CSS_SELECTOR, "button.pin"), then="已置顶，这一条")
    turn = row_with(browser, "tr.turn", "杭州")
    assert "已置顶 · 不过期" in turn.text and "pinned" in (turn.get_attribute("class") or "")
    fact = browser.find_element(By.CSS_SELECTOR, "tr.memory")
    await submit(browser, fact.find_element(By.CSS_SELECTOR, "button.pin"), then="已置顶，这一条")
    fact = browser.find_element(By.CSS_SELECTOR, "tr.memory")
    assert "已置顶" in fact.text and "取消置顶" in fact.text
    shot(browser, "09-pinned")
    shot(browser, "09-pinned-phone", PHONE)

    turn = row_with(browser, "tr.turn", "杭州")
    await submit(browser, turn.find_element(By.CSS_SELECTOR, "button.pin"), then="已取消置顶")
    assert "已置顶 · 不过期" not in row_with(browser, "tr.turn", "杭州").text
    await go(browser, f"{console_wire.base}/audit")
    assert "置顶" in text_of(browser) and "取消置顶" in text_of(browser)


async def test_operator_deletes_a_selection_and_restores_each_item(
    console_wire: ConsoleBot, browser: WebDriver
):
    await go(browser, f"{console_wire.base}/session?key={ALICE}")
    for text in ("旺财真可爱", "杭州"):
        await click(row_with(browser, "tr.turn", text).find_element(By.NAME, "item"))
    shot(browser, "10-selection")
    await submit(
        browser,
        browser.find_element(By.CSS_SELECTOR, "form.selection button"),
        then="已把 2 条移入回收站",
    )
    assert "旺财真可爱" not in text_of(browser) and "杭州" not in text_of(browser)
    assert "我家的狗叫旺财" in text_of(browser)  # not selected, kept

    await go(browser, f"{console_wire.base}/bin")
    assert len(browser.find_elements(By.CSS_SELECTOR, "tr.binned")) == 2
    shot(browser, "11-bin-selection")
    for _ in range(2):
        await go(browser, f"{console_wire.base}/bin")
        first = browser.find_elements(By.CSS_SELECTOR, "tr.binned")[0]
        await submit(browser, first.find_element(By.TAG_NAME, "button"), then="已恢复")
    assert "旺财真可爱" in text_of(browser) and "下周三我要去杭州出差" in text_of(browser)
    await go(browser, f"{console_wire.base}/bin")
    assert "回收站是空的" in text_of(browser)


LAPTOP = (1366, 768)
ROW_MAX_PX = 44  # a turn of one line: ~15 turns on a 1366×768 screen (they were ~115 px)
WIDTHS = (LAPTOP, PHONE)
ENGLISH_WORD = re.compile(r"[A-Za-z]{3,}")


def top(element: WebElement) -> float:
    return float(element.rect["y"])


async def every_page_shot(browser: WebDriver, base: str, name: str, path: str) -> None:
    """The page at both widths: its first screen (what the operator sees) and all of it."""
    for size in WIDTHS:
        browser.set_window_size(*size)
        await go(browser, f"{base}{path}")
        full_shot(browser, f"page-{name}-{size[0]}", size, first_screen=True)
        full_shot(browser, f"page-{name}-{size[0]}-full", size)


async def test_every_page_at_both_widths_has_the_operators_layout(
    console_wire: ConsoleBot, browser: WebDriver
):
    base = console_wire.base
    # An entry an agent wrote before the MCP tools wrote Chinese, in Bob's group session.
    conn = await asyncpg.connect(console_wire.dsn)
    try:
        await conn.execute(
            "INSERT INTO memory_audit_log (actor, action, target_kind, session_key, after_text)"
            " VALUES ('mcp:http', 'recall', 'query', $1, '周会 → 2 turn(s), 0 fact(s)')",
            f"{GROUP}:{BOB}",
        )
    finally:
        await conn.close()
    await go(browser, f"{base}/session?key={ALICE}")
    await submit(browser, row_with(browser, "tr.turn", "杭州").find_element(
        By.CSS_SELECTOR, "button.danger"), then="已移入回收站")  # fmt: skip
    pages = {
        "overview": "/", "sessions": "/sessions", "session": f"/session?key={ALICE}",
        "bin": "/bin", "audit": "/audit", "debug": f"/debug?user={ALICE}", "settings": "/settings",
    }  # fmt: skip
    for name, path in pages.items():
        await every_page_shot(browser, base, name, path)

    # A phone: 状态 is the first figure, on the first screen.
    browser.set_window_size(*PHONE)
    await go(browser, f"{base}/")
    figures = browser.find_elements(By.CSS_SELECTOR, ".headline .figure")
    assert figures[0].get_attribute("id") == "figure-state"
    assert top(figures[0]) < PHONE[1] / 2

    # A laptop: a turn is one short row, its buttons on one line, 置顶 not a filled button.
    browser.set_window_size(*LAPTOP)
    await go(browser, f"{base}/session?key={ALICE}")
    turns = browser.find_elements(By.CSS_SELECTOR, "tr.turn")
    assert turns and all(t.rect["height"] <= ROW_MAX_PX for t in turns), [
        t.rect["height"] for t in turns
    ]
    for row in turns:
        buttons = row.find_elements(By.CSS_SELECTOR, ".row-actions > * > :is(summary, button)")
        assert len(buttons) == 3 and len({round(top(b)) for b in buttons}) == 1
    pin = turns[0].find_element(By.CSS_SELECTOR, "button.pin")
    assert pin.value_of_css_property("background-color") == "rgba(255, 255, 255, 1)"

    # A phone: a card shows what was said before when, who and its buttons.
    browser.set_window_size(*PHONE)
    await go(browser, f"{base}/session?key={ALICE}")
    for selector in ("tr.turn", "tr.memory"):
        for card in browser.find_elements(By.CSS_SELECTOR, selector):
            text = card.find_element(By.CSS_SELECTOR, "td.text")
            others = card.find_elements(By.CSS_SELECTOR, "td:not(.text)")
            assert all(top(text) < top(o) for o in others if o.text.strip()), card.text
    await go(browser, f"{base}/bin")
    card = browser.find_element(By.CSS_SELECTOR, "tr.binned")
    assert top(card.find_element(By.CSS_SELECTOR, "td.text")) < top(
        card.find_element(By.TAG_NAME, "button")
    )

    # The audit log: Chinese, sessions by their people's names.
    browser.set_window_size(*LAPTOP)
    await go(browser, f"{base}/audit")
    rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "tr.audit")]
    agent = "MCP 智能体（http）"  # the transport an agent came over is its name
    assert rows and not [r for r in rows if ENGLISH_WORD.search(r.replace(agent, ""))], rows
    assert any("「周会」→ 对话 2 条，事实 0 条" in r and "波波" in r for r in rows), rows
    assert any("修改提炼记忆" in r and "阿丽 · 私聊" in r for r in rows), rows
    assert not any(f"{GROUP}:{BOB}" in r for r in rows)

    # The debugger: Chinese role headings, the session by name.
    await go(browser, f"{base}/debug?user={ALICE}")
    browser.find_element(By.NAME, "message").send_keys("我家的狗叫什么")
    await submit(
        browser, browser.find_element(By.CSS_SELECTOR, "form.filters button"), then="最终提示词"
    )
    headings = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "main h3")]
    assert headings and set(headings) <= {"系统提示词", "用户消息", "机器人的回复", "工具结果"}
    assert "阿丽 · 私聊" in text_of(browser)
    for size in WIDTHS:
        full_shot(browser, f"page-debug-answer-{size[0]}", size)

    # Settings: grouped under their names, each with its one-line description.
    await go(browser, f"{base}/settings")
    titles = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "section.settings h3")]
    assert "最常改的十项" in titles and "向量嵌入" in titles
    assert not [t for t in titles if t.strip().isdigit()]
    described = browser.find_elements(By.CSS_SELECTOR, "tr.setting td.text")
    assert len(described) >= 90 and all(d.text.strip() for d in described)
    llm = row_with(browser, "tr.setting", "LLM_MODEL")
    assert "聊天模型名" in llm.text

    # No box for a missing glyph: nothing outside the fonts a server has (no emoji).
    for path in pages.values():
        await go(browser, f"{base}{path}")
        assert not [c for c in text_of(browser) if ord(c) > 0xFFFF or 0x2600 <= ord(c) < 0x2800]
