"""The console on the real bot: nothing without the token, no change without the CSRF token, no
cross-site request, limited login attempts, one session's rows only, everything escaped."""

from __future__ import annotations

import asyncio
import html
import re

import asyncpg
import httpx

from tests.plugin.console_bot import (
    ALICE,
    BOB,
    CONSOLE_TOKEN,
    GROUP,
    XSS,
    ConsoleBot,
    same_origin,
)
from tests.plugin.wire import OneBotPeer, post_event, start_bot, stop_bot

PAGES = ["/memory/", "/memory/sessions", f"/memory/session?key={ALICE}", "/memory/bin",
         "/memory/audit", "/memory/debug", "/memory/settings"]  # fmt: skip
CHANGES = ["/memory/turn/edit", "/memory/memory/edit", "/memory/delete", "/memory/bin/restore",
           "/memory/group-switch", "/memory/group-sharing", "/memory/logout", "/memory/pin",
           "/memory/delete-selected"]  # fmt: skip


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page[:2000]
    return found.group(1)


async def audit_rows(client: httpx.AsyncClient) -> int:
    return (await client.get("/memory/audit")).text.count('<tr class="audit">')


async def test_every_page_and_change_refuses_a_missing_or_unknown_session(console_wire: ConsoleBot):
    async with console_wire.client() as client:
        client.headers.update(same_origin(console_wire))
        for cookie in (None, "forged-session-id"):
            client.cookies.clear()
            if cookie:
                client.cookies.set("tm_console", cookie)
            for path in PAGES:
                answer = await client.get(path)
                assert answer.status_code == 401, path
                assert "控制台令牌" in answer.text  # the login form, never the page
                assert "旺财" not in answer.text
            for path in CHANGES:
                answer = await client.post(path, data={"key": str(ALICE), "id": "1", "csrf": "x"})
                assert answer.status_code == 401, path


async def test_a_wrong_token_does_not_log_in(console_wire: ConsoleBot):
    async with console_wire.client() as client:
        client.headers.update(same_origin(console_wire))
        answer = await client.post("/memory/login", data={"token": CONSOLE_TOKEN + "x"})
        assert answer.status_code == 401 and "令牌不对" in answer.text
        assert "tm_console" not in answer.cookies
        assert (await client.get("/memory/sessions")).status_code == 401


async def test_login_sets_an_httponly_samesite_strict_cookie_and_pages_carry_a_strict_csp(
    console_wire: ConsoleBot,
):
    async with console_wire.client() as client:
        client.headers.update(same_origin(console_wire))
        answer = await client.post("/memory/login", data={"token": CONSOLE_TOKEN})
        cookie = answer.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/memory" in cookie
        page = await client.get("/memory/sessions")
        assert page.status_code == 200
        assert "default-src 'none'" in page.headers["content-security-policy"]
        assert page.headers["x-frame-options"] == "DENY"


async def test_changes_without_the_sessions_csrf_token_are_refused_and_change_nothing(
    console_wire: ConsoleBot,
):
    async with console_wire.logged_in() as client:
        page = (await client.get(f"/memory/session?key={ALICE}")).text
        turn_id = re.search(r'id="turn-(\d+)"', page).group(1)  # type: ignore[union-attr]
        before = await audit_rows(client)
        for csrf in (None, "", "wrong-token"):
            data = {"key": str(ALICE), "id": turn_id, "kind": "turn", "text": "被篡改",
                    "pinned": "1", "item": f"turn:{turn_id}"}  # fmt: skip
            if csrf is not None:
                data["csrf"] = csrf
            for path in ("/memory/turn/edit", "/memory/delete", "/memory/pin",
                         "/memory/delete-selected"):  # fmt: skip
                assert (await client.post(path, data=data)).status_code == 403, path
        assert await audit_rows(client) == before
        after = (await client.get(f"/memory/session?key={ALICE}")).text
        assert "被篡改" not in after and f'id="turn-{turn_id}"' in after
        assert "已置顶" not in after


async def test_cross_site_requests_are_refused_even_with_a_valid_session(console_wire: ConsoleBot):
    async with console_wire.logged_in() as client:
        page = (await client.get("/memory/sessions")).text
        csrf = csrf_of(page)
        for headers in (
            {"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example"},
            {"Sec-Fetch-Site": "same-site"},
            {"Origin": "https://evil.example", "Sec-Fetch-Site": ""},
        ):
            client.headers.clear()
            client.headers.update({k: v for k, v in headers.items() if v})
            assert (await client.get("/memory/sessions")).status_code == 403, headers
            answer = await client.post(
                "/memory/group-switch", data={"csrf": csrf, "group": "1", "on": "0"}
            )
            assert answer.status_code == 403, headers
            for path, data in (
                ("/memory/pin", {"kind": "turn", "id": "1", "pinned": "1"}),
                ("/memory/delete-selected", {"item": "turn:1"}),
            ):
                answer = await client.post(path, data={"csrf": csrf, "key": str(ALICE), **data})
                assert answer.status_code == 403, (path, headers)
        client.headers.clear()  # a POST that says nothing of where it comes from
        answer = await client.post(
            "/memory/group-switch", data={"csrf": csrf, "group": "1", "on": "0"}
        )
        assert answer.status_code == 403


async def test_a_search_in_one_session_never_shows_another_sessions_rows(console_wire: ConsoleBot):
    async with console_wire.logged_in() as client:
        for mode in ("keyword", "meaning"):
            page = (
                await client.get(
                    "/memory/session", params={"key": str(ALICE), "q": "骨头", "mode": mode}
                )
            ).text
            assert "旺财" in page, mode
            assert "大黄" not in page and "狗粮" not in page, (
                mode
            )  # Bob's, and Alice's in the group


async def test_user_text_is_escaped_on_every_page(console_wire: ConsoleBot):
    async with console_wire.logged_in() as client:
        for path in ("/memory/sessions", f"/memory/session?key={BOB}", "/memory/audit"):
            page = (await client.get(path)).text
            assert "<script>" not in page and "<img src=x" not in page, path
        bob = (await client.get(f"/memory/session?key={BOB}")).text
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in bob
        page = (await client.get("/memory/session", params={"key": str(BOB), "q": XSS})).text
        assert "<script>" not in page


async def test_the_debugger_answers_a_post_and_keeps_the_message_out_of_the_log(
    console_wire: ConsoleBot,
):
    marker = "调试标记消息旺财在哪"
    async with console_wire.logged_in() as client:
        csrf = csrf_of((await client.get("/memory/debug")).text)
        answer = await client.post(
            "/memory/debug", data={"csrf": csrf, "user": str(ALICE), "message": marker}
        )
        assert answer.status_code == 200 and "最终提示词" in answer.text
        assert "我家的狗叫旺财" in answer.text  # Alice's own turn is a candidate
        assert "大黄" not in answer.text  # Bob's never is
    assert marker not in console_wire.bot.log_text()


async def test_the_onebot_post_guard_still_refuses_events_beside_the_console(
    console_wire: ConsoleBot,
):
    answer = await post_event(console_wire.bot, {"post_type": "meta_event"}, path="/onebot/v11/")
    assert answer.status_code == 403


async def test_the_session_search_text_stays_out_of_the_access_log(console_wire: ConsoleBot):
    marker = "搜索标记词旺财的骨头"
    async with console_wire.logged_in() as client:
        answer = await client.get("/memory/session", params={"key": str(ALICE), "q": marker})
        assert answer.status_code == 200
    log = console_wire.bot.log_text()
    assert "/memory/session?…" in log  # the request is logged, its query is not
    assert marker not in log and "%E6%90%9C" not in log


async def test_a_selection_through_one_session_moves_only_that_sessions_rows(
    console_wire: ConsoleBot,
):
    async with console_wire.logged_in() as client:
        bob_page = (await client.get(f"/memory/session?key={BOB}")).text
        bob_turn = re.search(r'id="turn-(\d+)"', bob_page).group(1)  # type: ignore[union-attr]
        page = (await client.get(f"/memory/session?key={ALICE}")).text
        csrf = csrf_of(page)
        answer = await client.post(
            "/memory/delete-selected",
            data={"csrf": csrf, "key": str(ALICE), "item": [f"turn:{bob_turn}"]},
        )
        assert answer.status_code == 303
        assert f'id="turn-{bob_turn}"' in (await client.get(f"/memory/session?key={BOB}")).text
        answer = await client.post(
            "/memory/delete-selected",
            data={"csrf": csrf, "key": str(ALICE), "item": ["turn:x"]},
        )
        assert answer.status_code == 400


async def test_session_names_come_from_the_connected_qq_client(console_wire: ConsoleBot):
    peer = await OneBotPeer.connect(console_wire.bot.ws_url, console_wire.bot.token)
    peer.member_names[(GROUP, BOB)] = "群名片波波酱"
    peer.nicknames[ALICE] = "QQ昵称阿丽丽"
    peer.group_names[GROUP] = "养狗交流群"
    try:
        async with console_wire.logged_in() as client:
            page = ""
            for _ in range(240):  # the bot registers the connection, then asks the client
                page = (await client.get("/memory/sessions")).text
                if "群名片波波酱" in page and "QQ昵称阿丽丽" in page:
                    break
                await asyncio.sleep(0.25)
            assert "群名片波波酱" in page and "QQ昵称阿丽丽" in page
            assert "养狗交流群" in page
            asked = {c.action for c in peer.calls}
            assert {"get_group_member_info", "get_stranger_info", "get_group_info"} <= asked
    finally:
        await peer.close()


async def test_the_settings_page_switches_a_groups_shared_notes_audited(console_wire: ConsoleBot):
    async def shared_in_database() -> bool | None:
        conn = await asyncpg.connect(console_wire.dsn)
        try:
            value: bool | None = await conn.fetchval(
                "SELECT shared FROM memory_shared_groups WHERE group_id = $1", GROUP
            )
            return value
        finally:
            await conn.close()

    async with console_wire.logged_in() as client:
        page = (await client.get("/memory/settings")).text
        assert "打开共享" in page and "关闭共享" not in page
        audited = await audit_rows(client)
        for on in ("1", "0"):  # on, then back off for the other tests of this module
            answer = await client.post(
                "/memory/group-sharing", data={"csrf": csrf_of(page), "group": GROUP, "on": on}
            )
            assert answer.status_code == 303
            page = (await client.get("/memory/settings")).text
            assert await shared_in_database() is (on == "1")
            assert ("关闭共享" in page) is (on == "1")
        assert await audit_rows(client) == audited + 2
        audit = (await client.get("/memory/audit")).text
        assert "打开群友共享" in audit and "关闭群友共享" in audit


# Words a Chinese console may show in Latin letters: names and units, not sentences (and the
# time zone's IANA name, as configured).
NAMES = {"QQ", "PostgreSQL", "MCP", "CSRF", "ms", "Asia", "Shanghai"}
_HIDDEN = re.compile(r"<(style|script|code|pre|title)\b.*?</\1>|<[^>]+>", re.S)


def english_words(page: str) -> set[str]:
    """The Latin-letter words of a page's visible text, outside code (the prompt as the model
    reads it), names and what people said (the seeded ``XSS`` line)."""
    text = html.unescape(_HIDDEN.sub(" ", page)).replace(XSS, " ")
    return set(re.findall(r"[A-Za-z]{2,}", text)) - NAMES


async def test_the_console_speaks_chinese_beyond_names_and_codes(console_wire: ConsoleBot):
    """Every page but the settings (which lists .env.prod's keys and their notes, full of
    product names), the recall debugger's answer included. (Before the login limit's test,
    which locks this address out.)"""
    async with console_wire.logged_in() as client:
        pages = {p: (await client.get(p)).text for p in PAGES if p != "/memory/settings"}
        csrf = csrf_of(pages["/memory/debug"])
        pages["debugger"] = (
            await client.post(
                "/memory/debug", data={"csrf": csrf, "user": str(ALICE), "message": "旺财在哪"}
            )
        ).text
    assert "最终提示词" in pages["debugger"] and "词元" in pages["debugger"]
    found = {path: sorted(english_words(page)) for path, page in pages.items()}
    assert {path: words for path, words in found.items() if words} == {}


async def test_login_attempts_are_rate_limited_then_even_the_right_token_waits(
    console_wire: ConsoleBot,
):
    # Last in this module: the limit holds for this client address for minutes. Each try claims
    # another address in X-Forwarded-For: no proxy is configured, so none is believed.
    async with console_wire.client() as client:
        client.headers.update(same_origin(console_wire))
        codes = [
            (
                await client.post(
                    "/memory/login",
                    data={"token": f"guess-{i}"},
                    headers={"X-Forwarded-For": f"198.51.100.{i}"},
                )
            ).status_code
            for i in range(7)
        ]
        # at most five refusals (an earlier test of this module spent one), then only 429
        first_wait = codes.index(429)
        assert 1 <= first_wait <= 5 and set(codes[:first_wait]) == {401}
        assert set(codes[first_wait:]) == {429}
        right = await client.post(
            "/memory/login",
            data={"token": CONSOLE_TOKEN},
            headers={"X-Forwarded-For": "198.51.100.200"},
        )
        assert right.status_code == 429 and "tm_console" not in right.cookies


async def test_without_a_token_the_console_does_not_exist_even_on_every_interface():
    bot = await start_bot(llm_url=None, extra_env={"HOST": "0.0.0.0", "MEMORY_CONSOLE_TOKEN": ""})
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{bot.port}", trust_env=False) as c:
            for path in ("/memory/", "/memory/login", "/memory/sessions"):
                assert (await c.get(path)).status_code == 404, path
            answer = await c.post("/memory/login", data={"token": ""})
            assert answer.status_code in (404, 405)
        assert "TemporalMemory console: off (MEMORY_CONSOLE_TOKEN is empty)" in bot.log_text()
    finally:
        await stop_bot(bot)
