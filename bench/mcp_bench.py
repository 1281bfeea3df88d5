"""Recall through MCP on loopback against the CLI's recall (issue 27, part 3).

A database of ``--rows`` synthetic turns (random vectors stored under the bundled model's name,
``--heavy-share`` of them in one chatty group session) is built through the core. The same
queries (two words of the synthetic vocabulary, each found by the keyword channel, embedded by
the bundled model) are then recalled for a typical private chat and for the heavy group:

1. the CLI's recall in its own process: ``cli.recall_json`` on an open memory (what
   ``python -m memory_core recall --json`` does once it has started), and the listing of
   ``/recall`` (``list_recall``, what the MCP tool runs) the same way;
2. the MCP tool through ``bot.py``'s ``/mcp`` (streamable HTTP, the bearer token), one SDK
   client keeping its connection, each call timed from the client;
3. the MCP tool through ``python -m memory_core mcp`` (stdio), the same way;
4. for scale, whole ``python -m memory_core recall --json`` processes (start-up included).

The target: an MCP recall on loopback within 2x of the CLI's (1).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx2
import numpy as np
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from bench.common import (
    WORDS,
    RandomQueryEmbedder,
    add_with_random_vectors,
    bench_data_dir,
    fmt,
    machine_line,
    percentiles,
    synthetic_turns,
)
from memory_core import open_memory
from memory_core.cli import recall_json
from memory_core.recall.listing import list_recall
from memory_core.settings import LOCAL_EMBEDDING_DIM, LOCAL_EMBEDDING_MODEL, MemorySettings
from tests.plugin.wire import start_bot, stop_bot

TOKEN = "mcp-bench-token-0123456789"
CHUNK = 20_000
CHATS = {"typical private chat": (10_002, None), "heavy group": (1, 999_999)}
ROOT = Path(__file__).resolve().parents[1]


def queries(count: int) -> list[str]:
    rng = np.random.default_rng(3)
    return [" ".join(rng.choice(WORDS, 2, replace=False)) for _ in range(count)]


async def build_database(data_dir: Path, rows: int, sessions: int, heavy_share: float) -> None:
    embedder = RandomQueryEmbedder(LOCAL_EMBEDDING_DIM, model=LOCAL_EMBEDDING_MODEL)
    memory = await open_memory(
        MemorySettings(memory_data_dir=data_dir), embedder=embedder, maintenance_interval=None
    )
    rng = np.random.default_rng(1)
    try:
        async with memory.parts.upkeep.vector_index_deferred():
            for start in range(0, rows, CHUNK):
                count = min(CHUNK, rows - start)
                turns = synthetic_turns(start, count, sessions, rng, heavy_share)
                await add_with_random_vectors(memory, turns, rng, CHUNK)
        async with memory.parts.database.pool.acquire() as conn:  # bench-only
            await conn.execute("VACUUM (ANALYZE) dialogues")
    finally:
        await memory.aclose()


async def timed(asked: list[str], call: Callable[[str], Awaitable[Any]]) -> dict[str, float]:
    await call(asked[0])  # warm: first plans, first embedding
    samples = []
    for query in asked:
        started = time.perf_counter()
        await call(query)
        samples.append((time.perf_counter() - started) * 1000)
    return percentiles(samples)


async def in_process(data_dir: Path, asked: list[str]) -> dict[str, dict[str, float]]:
    """(1): the CLI's recall and ``/recall``'s listing on an open memory (the bundled model)."""
    memory = await open_memory(MemorySettings(memory_data_dir=data_dir), maintenance_interval=None)
    results = {}
    try:
        for chat, (user_id, group_id) in CHATS.items():

            async def cli(query: str, u: int = user_id, g: int | None = group_id) -> Any:
                return await recall_json(
                    memory.parts, {"user_id": u, "group_id": g, "query": query}
                )

            async def listing(query: str, u: int = user_id, g: int | None = group_id) -> Any:
                now = datetime.now(timezone.utc)
                return await list_recall(memory.parts, u, query, g, now=now)

            results[f"CLI recall (in process), {chat}"] = await timed(asked, cli)
            results[f"/recall listing (in process), {chat}"] = await timed(asked, listing)
    finally:
        await memory.aclose()
    return results


async def through_mcp(client: Client, label: str, asked: list[str]) -> dict[str, dict[str, float]]:
    results = {}
    for chat, (user_id, group_id) in CHATS.items():

        async def call(query: str, u: int = user_id, g: int | None = group_id) -> Any:
            result = await client.call_tool("recall", {"user_id": u, "group_id": g, "query": query})
            if result.is_error:
                raise RuntimeError(result.content)
            return result

        results[f"MCP recall over {label}, {chat}"] = await timed(asked, call)
    return results


async def over_http(data_dir: Path, asked: list[str]) -> dict[str, dict[str, float]]:
    """(2): the bot's ``/mcp``."""
    bot = await start_bot(
        llm_url=None, extra_env={"MEMORY_DATA_DIR": str(data_dir), "MEMORY_MCP_TOKEN": TOKEN}
    )
    try:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx2.AsyncClient(headers=headers, timeout=120, trust_env=False) as http:
            url = f"http://127.0.0.1:{bot.port}/mcp"
            async with Client(streamable_http_client(url, http_client=http)) as client:
                return await through_mcp(client, "HTTP (bot's /mcp)", asked)
    finally:
        await stop_bot(bot)
        shutil.rmtree(bot.data_dir, ignore_errors=True)


async def over_stdio(data_dir: Path, asked: list[str]) -> dict[str, dict[str, float]]:
    """(3): ``python -m memory_core mcp``."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memory_core", "--data-dir", str(data_dir), "mcp"],
        env={**os.environ, "PYTHONPATH": str(ROOT), "MEMORY_DSN": ""},
        cwd=data_dir,
    )
    async with Client(params, read_timeout_seconds=300) as client:
        return await through_mcp(client, "stdio", asked)


def whole_processes(data_dir: Path, asked: list[str]) -> dict[str, float]:
    """(4): one ``python -m memory_core recall --json`` per query, start-up included."""
    samples = []
    user_id, _ = CHATS["typical private chat"]
    for query in asked:
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "memory_core", "--data-dir", str(data_dir), "recall",
             "--json", "--user-id", str(user_id), query],
            check=True, capture_output=True, cwd=data_dir,
            env={**os.environ, "PYTHONPATH": str(ROOT), "MEMORY_DSN": ""},
        )  # fmt: skip
        samples.append((time.perf_counter() - started) * 1000)
    return percentiles(samples)


async def run(args: argparse.Namespace) -> None:
    print(f"MCP recall — {args.rows} turns, {args.sessions} sessions, heavy share "
          f"{args.heavy_share}, {args.queries} queries; {machine_line()}")  # fmt: skip
    print(f"  load average at the start: {os.getloadavg()}")
    asked = queries(args.queries)
    with bench_data_dir("mcp") as root:
        await build_database(root, args.rows, args.sessions, args.heavy_share)
        results = await in_process(root, asked)
        results |= await over_http(root, asked)
        results |= await over_stdio(root, asked)
        results["whole CLI process per query, typical private chat"] = whole_processes(
            root, asked[: args.processes]
        )
    for name, stats in results.items():
        print(f"  {name}: {fmt(stats)}")
    for chat in CHATS:
        cli = results[f"CLI recall (in process), {chat}"]["p50"]
        for label in ("HTTP (bot's /mcp)", "stdio"):
            mcp = results[f"MCP recall over {label}, {chat}"]["p50"]
            print(f"  {chat}: MCP over {label} / CLI at p50 = {mcp / cli:.2f}x (target <= 2x)")
    print(f"  load average at the end: {os.getloadavg()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--heavy-share", type=float, default=0.25)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--processes", type=int, default=5, help="whole CLI runs timed")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
