"""``python -m memory_core mcp``: the official SDK client spawns it over stdio against the test's
real PostgreSQL, lists the tools and calls them; scopes, opt-outs, the audit log, read-only."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult, TextContent

from memory_core.storage.opt_outs import SQL_OPT_OUT

ROOT = Path(__file__).resolve().parents[2]
ALICE, BOB, GROUP, OTHER_GROUP = 3001, 3002, 7007, 7008


@asynccontextmanager
async def stdio_memory(dsn: str, data_dir: Path, **env: str) -> AsyncIterator[Client]:
    """The SDK client connected to a spawned ``python -m memory_core mcp``."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memory_core", "--data-dir", str(data_dir), "mcp"],
        env={**os.environ, "MEMORY_DSN": dsn, "PYTHONPATH": str(ROOT), **env},
        cwd=data_dir,  # no .env.prod there: only the environment counts
    )
    async with Client(params, read_timeout_seconds=300) as client:
        yield client


def text_of(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, text_of(result)
    found = result.structured_content
    assert isinstance(found, dict), result
    return found


async def audit_entries(dsn: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetch(
            "SELECT actor, action, target_kind, session_key, after_text FROM memory_audit_log "
            "ORDER BY id"
        )
    finally:
        await conn.close()


async def test_the_sdk_client_lists_and_calls_the_tools_each_in_its_own_chat(
    fresh_dsn: str, tmp_data_dir: Path
):
    async with stdio_memory(fresh_dsn, tmp_data_dir) as client:
        tools = await client.list_tools()
        assert sorted(t.name for t in tools.tools) == [
            "find_people", "forget", "recall", "remember",
        ]  # fmt: skip
        recall_schema = next(t for t in tools.tools if t.name == "recall").input_schema
        assert set(recall_schema["required"]) == {"user_id", "query"}

        said = [
            (ALICE, GROUP, "我每天早上都喝一杯咖啡"),
            (BOB, GROUP, "我也爱喝咖啡，手冲的那种"),
            (ALICE, OTHER_GROUP, "另一个群里：咖啡豆买好了"),
            (ALICE, None, "私聊里说：咖啡机坏了"),
        ]
        ids = []
        for user_id, group_id, text in said:
            name = "爱丽丝" if user_id == ALICE else "鲍勃"
            stored = await call(
                client, "remember", user_id=user_id, text=text, group_id=group_id, name=name
            )
            assert stored["stored"] and not stored["spooled"], stored
            ids.append(stored["id"])
        # The agent that knows her by name finds her chats, the newest first.
        alice = await call(client, "find_people", text="爱丽丝")
        assert [(c["user_id"], c["group_id"]) for c in alice["chats"]] == [
            (ALICE, None), (ALICE, OTHER_GROUP), (ALICE, GROUP),
        ]  # fmt: skip

        found = await call(client, "recall", user_id=ALICE, query="咖啡", group_id=GROUP)
        assert [t["content"] for t in found["turns"]] == [said[0][2]]
        assert {(t["user_id"], t["group_id"]) for t in found["turns"]} == {(ALICE, GROUP)}
        private = await call(client, "recall", user_id=ALICE, query="咖啡")
        assert [t["id"] for t in private["turns"]] == [ids[3]]

        gone = await call(client, "forget", user_id=ALICE, group_id=GROUP)
        assert gone["dialogues"] == 1, gone
        after = await call(client, "recall", user_id=ALICE, query="咖啡", group_id=GROUP)
        assert after["turns"] == []
        # Bob's turn in the same group and Alice's other chats are untouched.
        bob = await call(client, "recall", user_id=BOB, query="咖啡", group_id=GROUP)
        assert [t["id"] for t in bob["turns"]] == [ids[1]]
        other = await call(client, "recall", user_id=ALICE, query="咖啡", group_id=OTHER_GROUP)
        assert [t["id"] for t in other["turns"]] == [ids[2]]

        bad = await client.call_tool("recall", {"user_id": ALICE, "query": "  "})
        assert bad.is_error and "query is empty" in text_of(bad)

    entries = await audit_entries(fresh_dsn)
    assert {e["actor"] for e in entries} == {"mcp:stdio"}
    actions = [(e["action"], e["session_key"]) for e in entries]
    assert actions[:4] == [
        ("remember", f"{GROUP}:{ALICE}"),
        ("remember", f"{GROUP}:{BOB}"),
        ("remember", f"{OTHER_GROUP}:{ALICE}"),
        ("remember", str(ALICE)),
    ]
    # A search by name is written in each chat it found (forgotten with that chat).
    assert {key for action, key in actions if action == "find"} == {
        str(ALICE), f"{OTHER_GROUP}:{ALICE}", f"{GROUP}:{ALICE}",
    }  # fmt: skip
    assert ("forget", f"{GROUP}:{ALICE}") in actions
    assert actions.count(("recall", f"{GROUP}:{ALICE}")) == 2
    # The forgotten chat's texts left the log; the others' stay.
    assert entries[0]["after_text"] is None
    assert [e["after_text"] for e in entries[1:4]] == [s[2] for s in said[1:4]]


async def test_an_opted_out_person_is_neither_remembered_nor_recalled_there(
    fresh_dsn: str, tmp_data_dir: Path
):
    async with stdio_memory(fresh_dsn, tmp_data_dir) as client:
        await call(client, "remember", user_id=ALICE, text="我的猫叫团子", group_id=GROUP)
        conn = await asyncpg.connect(fresh_dsn)
        try:
            await conn.execute(SQL_OPT_OUT, ALICE, str(GROUP))  # what /不记我 writes
        finally:
            await conn.close()
        for tool, arguments in [
            ("remember", {"text": "我的狗叫豆豆"}),
            ("recall", {"query": "猫"}),
        ]:
            refused = await client.call_tool(
                tool, {"user_id": ALICE, "group_id": GROUP, **arguments}
            )
            assert refused.is_error, refused
            assert "asked not to be remembered" in text_of(refused)
        # Forgetting stays allowed, and the private chat is not affected.
        assert (await call(client, "forget", user_id=ALICE, group_id=GROUP))["dialogues"] == 1
        await call(client, "remember", user_id=ALICE, text="私聊：我的猫叫团子")


async def test_read_only_serves_recall_alone_and_refuses_the_others(
    fresh_dsn: str, tmp_data_dir: Path
):
    async with stdio_memory(fresh_dsn, tmp_data_dir, MEMORY_MCP_READONLY="true") as client:
        tools = await client.list_tools()
        assert [t.name for t in tools.tools] == ["find_people", "recall"]
        for tool, arguments in [
            ("remember", {"user_id": ALICE, "text": "记住这个"}),
            ("forget", {"user_id": ALICE}),
        ]:
            refused = await client.call_tool(tool, arguments)
            assert refused.is_error and "Unknown tool" in text_of(refused), refused
        found = await call(client, "recall", user_id=ALICE, query="这个")
        assert found["turns"] == []
    entries = await audit_entries(fresh_dsn)
    assert [e["action"] for e in entries] == ["recall"]
    assert json.dumps([dict(e) for e in entries], ensure_ascii=False).count("记住这个") == 0
