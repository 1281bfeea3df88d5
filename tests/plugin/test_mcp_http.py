"""The memory over MCP at ``/mcp`` on the real bot (loopback): the official SDK client with the
bearer token lists and calls the tools; without it every request is refused (401); bodies are
bounded; a read-only bot serves no remember or forget; a short token ends the start in one line."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import httpx
import httpx2
import pytest
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

from tests.conftest import new_database
from tests.plugin.test_startup_checks import refusal_line
from tests.plugin.wire import BotProcess, run_bot_until_exit, start_bot, stop_bot

TOKEN = "mcp-test-token-5c1e9a7b"
CONSOLE_TOKEN = "console-token-for-mcp-test"
ALICE, BOB, GROUP, OTHER_GROUP = 4001, 4002, 8008, 8009
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "curl", "version": "1"},
    },
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


@asynccontextmanager
async def mcp_bot(server_dsn: str, **env: str) -> AsyncIterator[tuple[BotProcess, str]]:
    """The real bot serving MCP with ``TOKEN`` over a fresh database; (bot, dsn)."""
    async with new_database(server_dsn) as dsn:
        bot = await start_bot(
            llm_url=None,
            extra_env={"MEMORY_DSN": dsn, "MEMORY_MCP_TOKEN": TOKEN, **env},
        )
        try:
            yield bot, dsn
        finally:
            await stop_bot(bot)
            log = bot.log_text()
            shutil.rmtree(bot.data_dir, ignore_errors=True)
            assert "Traceback" not in log, log[log.index("Traceback") - 2000 :][:6000]
            assert TOKEN not in log


@asynccontextmanager
async def sdk_client(
    bot: BotProcess, token: str | None = TOKEN, statuses: list[int] | None = None
) -> AsyncIterator[Client]:
    """The SDK client on ``/mcp`` with this bearer token; ``statuses`` gets each answer's."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def note(response: httpx2.Response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    async with httpx2.AsyncClient(
        headers=headers, timeout=120, trust_env=False, event_hooks={"response": [note]}
    ) as http:
        transport = streamable_http_client(f"http://127.0.0.1:{bot.port}/mcp", http_client=http)
        async with Client(transport, read_timeout_seconds=120) as client:
            yield client


def leaves(error: BaseException) -> list[BaseException]:
    """The errors an exception group holds (the SDK client's task groups wrap them)."""
    inner: tuple[BaseException, ...] = getattr(error, "exceptions", ())  # 3.10: no group type
    return [leaf for one in inner for leaf in leaves(one)] if inner else [error]


def text_of(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, text_of(result)
    assert isinstance(result.structured_content, dict), result
    return result.structured_content


async def test_with_the_token_the_sdk_client_lists_and_calls_the_tools_in_one_chat_only(
    pg_server_dsn: str,
):
    console = {"MEMORY_CONSOLE_TOKEN": CONSOLE_TOKEN}
    async with mcp_bot(pg_server_dsn, **console) as (bot, dsn), sdk_client(bot) as client:
        tools = await client.list_tools()
        assert sorted(t.name for t in tools.tools) == [
            "find_people", "forget", "recall", "remember",
        ]  # fmt: skip
        said = [
            (ALICE, GROUP, "周末我打算去爬黄山"),
            (BOB, GROUP, "我上个月刚爬过黄山"),
            (ALICE, OTHER_GROUP, "另一个群：黄山的日出很美"),
        ]
        ids = [
            (await call(client, "remember", user_id=u, text=t, group_id=g))["id"]
            for u, g, t in said
        ]
        found = await call(client, "recall", user_id=ALICE, query="黄山", group_id=GROUP)
        assert [t["id"] for t in found["turns"]] == [ids[0]]
        gone = await call(client, "forget", user_id=ALICE, group_id=GROUP)
        assert gone["dialogues"] == 1
        assert (await call(client, "recall", user_id=ALICE, query="黄山", group_id=GROUP))[
            "turns"
        ] == []
        bob = await call(client, "recall", user_id=BOB, query="黄山", group_id=GROUP)
        assert [t["id"] for t in bob["turns"]] == [ids[1]]
        conn = await asyncpg.connect(dsn)
        try:
            rows = await conn.fetch("SELECT actor, action FROM memory_audit_log ORDER BY id")
        finally:
            await conn.close()
        assert {r["actor"] for r in rows} == {"mcp:http"}
        assert [r["action"] for r in rows] == [
            "remember", "remember", "remember", "recall", "forget", "recall", "recall",
        ]  # fmt: skip
        # The operator reads them in the console's audit log, beside the console's own changes.
        origin = f"http://127.0.0.1:{bot.port}"
        browser = {"Origin": origin, "Sec-Fetch-Site": "same-origin"}
        async with httpx.AsyncClient(base_url=origin, headers=browser, trust_env=False) as web:
            login = await web.post("/memory/login", data={"token": CONSOLE_TOKEN})
            assert login.status_code == 303, login.text
            audit = (await web.get("/memory/audit")).text
        assert audit.count('<tr class="audit">') == 7
        assert audit.count("MCP 智能体（http）") == 7
        assert "记住一句话" in audit and "忘记整个会话" in audit
        assert said[1][2] in audit  # a note's text, as an edit's text after is shown


async def test_without_the_right_bearer_token_every_request_is_refused_401(pg_server_dsn: str):
    async with mcp_bot(pg_server_dsn) as (bot, dsn):
        url = f"http://127.0.0.1:{bot.port}/mcp"
        async with httpx.AsyncClient(trust_env=False, timeout=60) as http:
            for headers in [
                {},
                {"Authorization": "Bearer wrong-token-of-some-length"},
                {"Authorization": TOKEN},  # no scheme
                {"Authorization": f"Bearer {TOKEN}x"},
                {"Authorization": f"Basic {TOKEN}"},
            ]:
                for method in ("POST", "GET", "DELETE"):
                    answer = await http.request(
                        method, url, json=INITIALIZE, headers={**MCP_HEADERS, **headers}
                    )
                    assert answer.status_code == 401, (method, headers, answer.text)
                    assert answer.headers["www-authenticate"] == "Bearer"
            accepted = await http.post(
                url, json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": f"Bearer {TOKEN}"}
            )
            assert accepted.status_code == 200, accepted.text
            assert accepted.json()["result"]["serverInfo"]["name"] == "temporal-memory"
            # Bodies are bounded like every body of the bot's app, token or not.
            big = b'{"jsonrpc": "2.0", "method": "x", "params": "' + b"a" * (3 << 20) + b'"}'
            for headers in ({}, {"Authorization": f"Bearer {TOKEN}"}):
                answer = await http.post(url, content=big, headers={**MCP_HEADERS, **headers})
                assert answer.status_code == 413, answer.text
        statuses: list[int] = []
        with pytest.raises(BaseException) as refused:
            async with sdk_client(bot, token=None, statuses=statuses) as client:
                await client.list_tools()
        assert any(isinstance(e, MCPError) for e in leaves(refused.value)), repr(refused.value)
        assert statuses and set(statuses) == {401}, statuses
        conn = await asyncpg.connect(dsn)
        try:
            assert await conn.fetchval("SELECT count(*) FROM memory_audit_log") == 0
        finally:
            await conn.close()


async def test_a_read_only_token_cannot_remember_or_forget(pg_server_dsn: str):
    async with mcp_bot(pg_server_dsn, MEMORY_MCP_READONLY="true") as (bot, dsn):
        async with sdk_client(bot) as client:
            assert [t.name for t in (await client.list_tools()).tools] == [
                "find_people", "recall",
            ]  # fmt: skip
            for tool, arguments in [
                ("remember", {"user_id": ALICE, "text": "记住：我怕高"}),
                ("forget", {"user_id": ALICE}),
            ]:
                refused = await client.call_tool(tool, arguments)
                assert refused.is_error and "Unknown tool" in text_of(refused), refused
            assert (await call(client, "recall", user_id=ALICE, query="怕高"))["turns"] == []
        conn = await asyncpg.connect(dsn)
        try:
            assert await conn.fetchval("SELECT count(*) FROM dialogues") == 0
        finally:
            await conn.close()


async def test_a_short_mcp_token_ends_the_start_in_one_line() -> None:
    exited = await run_bot_until_exit(extra_env={"MEMORY_MCP_TOKEN": "short-token-15ch"[:15]})
    line = refusal_line(exited)
    assert "MEMORY_MCP_TOKEN is shorter than 16 characters" in line
    assert "short-token-15c" not in line
