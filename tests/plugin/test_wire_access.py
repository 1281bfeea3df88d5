"""Every way into the real bot is authenticated: the WebSocket by ``ONEBOT_ACCESS_TOKEN``, events
sent as HTTP POST only when ``ONEBOT_SECRET`` is set (and then only when signed), and a listen
address other machines can reach only with a token.

Two bots serve the module: one as shipped (no secret) and one with ``ONEBOT_SECRET``; each has a
NapCat-like peer connected over the WebSocket with the right token, so a forged event that got
in would be answered through that real connection.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.plugin.events import SUPERUSER_ID, message_payload, text_seg
from tests.plugin.wire import (
    EVENT_POST_PATHS,
    WS_PATH,
    BotProcess,
    OneBotPeer,
    post_event,
    run_bot_until_exit,
    sent_text,
    start_bot,
    stop_bot,
)

SECRET = "wire-test-secret"
REMEMBERED = "记住了，这条会一直保留。"
REFUSAL_WARNING = "refused an HTTP POST event"


@dataclass
class Connected:
    bot: BotProcess
    peer: OneBotPeer

    async def say(self, text: str, *, user_id: int) -> str:
        """Over the real WebSocket: send a private message, return the bot's answer."""
        mark = len(self.peer.calls)
        await self.peer.send_event(message_payload([text_seg(text)], user_id=user_id))
        return sent_text(await self.peer.wait_reply(user_id=user_id, after=mark))

    def replies_to(self, user_id: int, *, after: int) -> list[str]:
        return [
            sent_text(c)
            for c in self.peer.calls[after:]
            if c.action in {"send_msg", "send_private_msg"} and c.params.get("user_id") == user_id
        ]


async def connected_bot(extra_env: dict[str, str]) -> AsyncIterator[Connected]:
    bot = await start_bot(llm_url=None, extra_env=extra_env)
    peer = None
    try:
        peer = await OneBotPeer.connect(bot.ws_url, bot.token)
        yield Connected(bot=bot, peer=peer)
    finally:
        if peer is not None:
            await peer.close()
        await stop_bot(bot)
        log = bot.log_text()
        shutil.rmtree(bot.data_dir, ignore_errors=True)
        assert "Traceback" not in log, log[log.index("Traceback") - 2000 :][:6000]


@pytest.fixture(scope="module")
async def unsigned() -> AsyncIterator[Connected]:
    """The bot as shipped: a token on the WebSocket, no ONEBOT_SECRET."""
    async for connected in connected_bot({}):
        yield connected


@pytest.fixture(scope="module")
async def signed() -> AsyncIterator[Connected]:
    # Also started without superusers, which the start-up log must warn about.
    async for connected in connected_bot({"ONEBOT_SECRET": SECRET, "SUPERUSERS": "[]"}):
        yield connected


async def assert_never_stored_or_answered(
    wire: Connected, markers: list[str], *, user_id: int, after: int
) -> None:
    # Room for a forged event that got in to be handled (the first one a bot handles is slow).
    await asyncio.sleep(1.5)
    # Recall by a word of the markers: the "nothing found" answer repeats the query.
    recalled = await wire.say("/recall 笔记", user_id=user_id)
    assert not [m for m in markers if m in recalled], recalled
    answers = wire.replies_to(user_id, after=after)
    assert answers == [recalled], answers  # the /recall answer only


# ----------------------------------------------------------------------------- without a secret


@pytest.mark.parametrize("path", EVENT_POST_PATHS)
async def test_forged_http_post_events_are_refused_without_onebot_secret_and_never_reach_memory(
    unsigned: Connected, path: str
):
    user = 21000 + EVENT_POST_PATHS.index(path)
    mark = len(unsigned.peer.calls)
    markers = []
    # No token, a wrong one, and even the right access token: it does not protect a POST.
    for token in (None, "wrong-token", unsigned.bot.token):
        markers.append(marker := f"伪造笔记{path}{token}")
        forged = message_payload([text_seg(f"/remember {marker}")], user_id=user)
        response = await post_event(unsigned.bot, forged, path=path, token=token)
        assert response.status_code == 403, (token, response.text)
        assert "ONEBOT_SECRET" in response.text
    await assert_never_stored_or_answered(unsigned, markers, user_id=user, after=mark)


async def test_a_forged_superuser_forget_all_over_http_deletes_nothing(unsigned: Connected):
    user = 21010
    assert await unsigned.say("/remember 不该被删的笔记", user_id=user) == REMEMBERED
    for text in ("/forget all", "确认"):
        forged = message_payload([text_seg(text)], user_id=SUPERUSER_ID)
        response = await post_event(unsigned.bot, forged, path="/onebot/v11/")
        assert response.status_code == 403
        await asyncio.sleep(0.5)
    assert "不该被删的笔记" in await unsigned.say("/recall 笔记", user_id=user)


async def test_a_flood_of_refused_posts_logs_one_warning_naming_onebot_secret(
    unsigned: Connected,
):
    forged = message_payload([text_seg("刷屏")], user_id=21011)
    before = unsigned.bot.log_text().count(REFUSAL_WARNING)
    responses = await asyncio.gather(
        *(post_event(unsigned.bot, forged, path="/onebot/v11/http") for _ in range(50))
    )
    assert {r.status_code for r in responses} == {403}
    warnings = [line for line in unsigned.bot.log_text().splitlines() if REFUSAL_WARNING in line]
    # One a minute at most (earlier tests of this module may have used this minute's line).
    assert len(warnings) - before <= 1 and len(warnings) >= 1
    assert all("ONEBOT_SECRET" in line and "[WARNING]" in line for line in warnings)


async def test_the_websocket_with_the_right_token_still_carries_events(unsigned: Connected):
    user = 21012
    assert await unsigned.say("/remember 经由WebSocket的笔记", user_id=user) == REMEMBERED
    assert "经由WebSocket的笔记" in await unsigned.say("/recall 笔记", user_id=user)


def test_start_up_line_names_the_napcat_address_the_token_and_that_posts_are_refused(
    unsigned: Connected,
):
    url = f"ws://127.0.0.1:{unsigned.bot.port}{WS_PATH}"
    lines = [line for line in unsigned.bot.log_text().splitlines() if url in line]
    assert len(lines) == 1, lines
    assert "access token required" in lines[0]
    assert "HTTP POST events refused (set ONEBOT_SECRET" in lines[0]
    assert "SUPERUSERS is empty" not in unsigned.bot.log_text()


def test_start_up_warns_that_admin_commands_are_refused_without_superusers(signed: Connected):
    [line] = [x for x in signed.bot.log_text().splitlines() if "SUPERUSERS is empty" in x]
    assert "[WARNING]" in line and "admin command" in line


# ----------------------------------------------------------------------------- refused clients

CONNECTION_REFUSED = "refused a OneBot WebSocket connection from"


async def handshake_status(
    bot: BotProcess, *, source: str, path: str = WS_PATH, token: str | None
) -> int:
    """Open a WebSocket as NapCat would, from the loopback address ``source``; the HTTP
    status the handshake got (101 when it was accepted, then closed again)."""
    headers = {"X-Self-ID": "1234567", "X-Client-Role": "Universal"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        ws = await connect(
            f"ws://127.0.0.1:{bot.port}{path}", additional_headers=headers, local_addr=(source, 0)
        )
    except InvalidStatus as refused:
        return int(refused.response.status_code)
    await ws.close()
    return 101


def refusal_lines(bot: BotProcess, source: str) -> list[str]:
    return [
        line for line in bot.log_text().splitlines() if f"{CONNECTION_REFUSED} {source} " in line
    ]


@pytest.mark.parametrize(
    ("source", "path", "token", "cause"),
    [
        ("127.0.0.2", WS_PATH, "wrong-token-123456", "wrong token"),
        ("127.0.0.3", WS_PATH, None, "no token sent"),
        ("127.0.0.4", "/onebot/v11", "wire-test-token", "must end in /onebot/v11/ws"),
    ],
    ids=["wrong-token", "no-token", "path-without-ws"],
)
async def test_a_refused_client_is_told_in_one_line_a_minute_naming_the_cause(
    unsigned: Connected, source: str, path: str, token: str | None, cause: str
):
    # Each case from its own loopback address: the line is once a minute per address.
    token = unsigned.bot.token if token == "wire-test-token" else token
    assert await handshake_status(unsigned.bot, source=source, path=path, token=token) == 403
    [line] = refusal_lines(unsigned.bot, source)
    assert "[WARNING]" in line and f" to {path}: " in line and cause in line
    # NapCat reconnects every few seconds: the next refusals within the minute add no line.
    for _ in range(3):
        assert await handshake_status(unsigned.bot, source=source, path=path, token=token) == 403
    assert refusal_lines(unsigned.bot, source) == [line]
    assert unsigned.bot.token not in unsigned.bot.log_text()


async def test_the_adapter_no_longer_logs_each_refused_token_itself(unsigned: Connected):
    for _ in range(3):
        status = await handshake_status(unsigned.bot, source="127.0.0.5", token="wrong-token-98")
        assert status == 403
    log = unsigned.bot.log_text()
    assert "Authorization Header is invalid" not in log
    assert len(refusal_lines(unsigned.bot, "127.0.0.5")) == 1
    # Nor does the web server: no line per refused handshake of that address.
    assert not [line for line in log.splitlines() if "127.0.0.5" in line and '" 403' in line]


async def test_a_token_sent_in_the_url_never_reaches_the_log(unsigned: Connected):
    secret_path = f"{WS_PATH}?access_token={unsigned.bot.token}"
    await handshake_status(unsigned.bot, source="127.0.0.7", path=secret_path, token=None)
    assert len(refusal_lines(unsigned.bot, "127.0.0.7")) == 1  # the refusal is said, once
    assert unsigned.bot.token not in unsigned.bot.log_text()


async def test_the_right_token_from_another_address_is_still_let_in(unsigned: Connected):
    status = await handshake_status(unsigned.bot, source="127.0.0.6", token=unsigned.bot.token)
    assert status == 101
    assert refusal_lines(unsigned.bot, "127.0.0.6") == []


# ----------------------------------------------------------------------------- with a secret


@pytest.mark.parametrize("path", EVENT_POST_PATHS)
async def test_a_correctly_signed_post_is_stored_and_answered_when_onebot_secret_is_set(
    signed: Connected, path: str
):
    user = 22000 + EVENT_POST_PATHS.index(path)
    marker = f"签名笔记{path}"
    mark = len(signed.peer.calls)
    event = message_payload([text_seg(f"/remember {marker}")], user_id=user)
    response = await post_event(signed.bot, event, path=path, secret=SECRET)
    assert response.status_code == 204, response.text
    # Answered through the real WebSocket connection of that account, and stored.
    answer = await signed.peer.wait_reply(user_id=user, after=mark)
    assert sent_text(answer) == REMEMBERED
    assert marker in await signed.say("/recall 笔记", user_id=user)


async def test_a_signed_post_with_a_null_data_segment_is_stored_and_answered(signed: Connected):
    user, marker = 22005, "空数据签名笔记"
    mark = len(signed.peer.calls)
    segments = [text_seg(f"/remember {marker}"), {"type": "face", "data": None}]
    event = message_payload(segments, user_id=user)
    response = await post_event(signed.bot, event, path="/onebot/v11/", secret=SECRET)
    assert response.status_code == 204, response.text
    answer = await signed.peer.wait_reply(user_id=user, after=mark)
    assert sent_text(answer) == REMEMBERED
    assert marker in await signed.say("/recall 笔记", user_id=user)


@pytest.mark.parametrize(
    ("secret", "status", "reason"),
    [(None, 401, "Missing Signature"), ("wrong-secret", 403, "Signature is invalid")],
    ids=["unsigned", "wrongly-signed"],
)
async def test_unsigned_or_wrongly_signed_posts_are_refused_when_onebot_secret_is_set(
    signed: Connected, secret: str | None, status: int, reason: str
):
    user = 22010 if secret is None else 22011
    mark = len(signed.peer.calls)
    markers = []
    for path in EVENT_POST_PATHS:
        markers.append(marker := f"未签名笔记{path}{secret}")
        forged = message_payload([text_seg(f"/remember {marker}")], user_id=user)
        response = await post_event(
            signed.bot, forged, path=path, secret=secret, token=signed.bot.token
        )
        # The adapter's own signature check refused it.
        assert (response.status_code, response.text) == (status, reason), path
    await assert_never_stored_or_answered(signed, markers, user_id=user, after=mark)


def test_start_up_line_says_signed_posts_are_accepted_when_onebot_secret_is_set(
    signed: Connected,
):
    url = f"ws://127.0.0.1:{signed.bot.port}{WS_PATH}"
    lines = [line for line in signed.bot.log_text().splitlines() if url in line]
    assert len(lines) == 1, lines
    assert "HTTP POST events accepted only when signed with ONEBOT_SECRET" in lines[0]
    assert SECRET not in signed.bot.log_text()


# ----------------------------------------------------------------------------- listen address


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
async def test_start_up_on_a_non_loopback_host_without_a_token_fails_before_the_database_starts(
    host: str,
):
    exited = await run_bot_until_exit(extra_env={"HOST": host, "ONEBOT_ACCESS_TOKEN": ""})
    assert exited.returncode == 1, exited.log
    refusals = [line for line in exited.log.splitlines() if "refuses to start" in line]
    assert len(refusals) == 1, exited.log
    assert "Traceback" not in exited.log, exited.log  # the one line, not a traceback after it
    assert "[ERROR]" in refusals[0] and f"HOST={host}" in refusals[0]
    assert "Set ONEBOT_ACCESS_TOKEN" in refusals[0]
    # The check runs before the embedded PostgreSQL starts: no server was ever left behind.
    assert not exited.database_started, exited.log
