"""The README's MCP snippets work as written: its stdio configuration starts the memory and the
official SDK lists and calls the tools through it; its Python snippet calls ``recall`` on the
real bot's ``/mcp``; its AstrBot configuration names the same address and header. Only the
placeholders (paths, port, token) are filled in."""

from __future__ import annotations

import ast
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters
from mcp.types import CallToolResult

from tests.plugin.test_mcp_http import TOKEN, mcp_bot

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CHECKOUT = "/path/to/temporal-memory"
README_URL = "http://127.0.0.1:8080/mcp"
TOKEN_PLACEHOLDER = "<MEMORY_MCP_TOKEN>"


def mcp_section() -> str:
    readme = README.read_text(encoding="utf-8")
    return readme.split("\n## MCP for agents\n", 1)[1].split("\n## ", 1)[0]


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", mcp_section(), re.S)


def stdio_config() -> dict[str, Any]:
    server: dict[str, Any] = json.loads(blocks("json")[0])["mcpServers"]["temporal-memory"]
    return server


def interpreter(command: str) -> str:
    """The README's interpreter in this checkout. `make install` makes it; a suite run by
    another interpreter of the same packages starts that one instead (the arguments, the
    environment and the folder stay the README's)."""
    return command if Path(command).exists() else sys.executable


async def test_the_readmes_stdio_configuration_starts_the_memory_for_the_sdk_client(
    fresh_dsn: str, tmp_data_dir: Path
) -> None:
    server = stdio_config()
    args = [
        a.replace(f"{CHECKOUT}/data", str(tmp_data_dir)).replace(CHECKOUT, str(ROOT))
        for a in server["args"]
    ]
    assert args[args.index("--env-file") + 1] == str(ROOT / ".env.prod")
    command = interpreter(server["command"].replace(CHECKOUT, str(ROOT)))
    params = StdioServerParameters(
        command=command,
        args=args,
        env={**os.environ, **server["env"], "MEMORY_DSN": fresh_dsn},
        cwd=tmp_data_dir,  # an agent starts it in a folder of its own
    )
    async with Client(params, read_timeout_seconds=300) as client:
        tools = await client.list_tools()
        assert sorted(t.name for t in tools.tools) == [
            "find_people", "forget", "recall", "remember",
        ]  # fmt: skip
        stored = await client.call_tool(
            "remember", {"user_id": 123456, "text": "我的生日是五月三日"}
        )
        assert not stored.is_error
        found = await client.call_tool("recall", {"user_id": 123456, "query": "生日"})
        assert "五月三日" in json.dumps(found.structured_content, ensure_ascii=False)


async def test_the_readmes_python_snippet_recalls_over_http_from_the_bot(
    pg_server_dsn: str,
) -> None:
    astrbot = json.loads(blocks("json")[1])
    assert astrbot["url"] == README_URL
    assert astrbot["headers"] == {"Authorization": f"Bearer {TOKEN_PLACEHOLDER}"}
    snippet = blocks("python")[0]
    assert README_URL in snippet and TOKEN_PLACEHOLDER in snippet

    async with mcp_bot(pg_server_dsn) as (bot, _dsn):
        code = snippet.replace(README_URL, f"http://127.0.0.1:{bot.port}/mcp").replace(
            TOKEN_PLACEHOLDER, TOKEN
        )
        namespace: dict[str, Any] = {}
        compiled = compile(code, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        pending = eval(compiled, namespace)  # the snippet's top-level `async with`
        if pending is not None:
            await pending
    found = namespace["found"]
    assert isinstance(found, CallToolResult)
    assert not found.is_error
    assert found.structured_content is not None and "turns" in found.structured_content
