"""Page latency of the web console on a large database, over HTTP against the real bot.

A database of ``--rows`` synthetic turns (``--heavy-share`` of them in one chatty group session,
the rest over ``--sessions`` sessions; random vectors stored under the bot's own embedding model
name, so the bot accepts them) is built through the core, then ``bot.py`` is started on it with
the console on, and every page is fetched ``--repeat`` times by a logged-in client. The figures
are whole requests: routing, the queries, the HTML, the loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import re
import shutil
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import numpy as np

from bench.common import (
    T0,
    RandomQueryEmbedder,
    add_with_random_vectors,
    bench_data_dir,
    fmt,
    machine_line,
    percentiles,
    synthetic_turns,
)
from memory_core import open_memory
from memory_core.distill.memory import ExtractedMemory
from memory_core.settings import LOCAL_EMBEDDING_DIM, LOCAL_EMBEDDING_MODEL, MemorySettings
from tests.plugin.wire import start_bot, stop_bot

TOKEN = "console-bench-token-1234"
CHUNK = 20_000
HEAVY = ("1", "999999")  # synthetic_turns' chatty session: user 1 in group 999999
TYPICAL_USER = 10_002
FIRST = T0  # synthetic_turns start here  # an even session number: a private chat


async def build_database(data_dir: Path, rows: int, sessions: int, heavy_share: float) -> None:
    # The synthetic turns are dated from 2024; move them to the last weeks so the charts of
    # the last 30 days have something to count.
    shift = datetime.now(timezone.utc) - timedelta(seconds=rows) - FIRST
    embedder = RandomQueryEmbedder(LOCAL_EMBEDDING_DIM, model=LOCAL_EMBEDDING_MODEL)
    memory = await open_memory(
        MemorySettings(memory_data_dir=data_dir), embedder=embedder, maintenance_interval=None
    )
    rng = np.random.default_rng(1)
    try:
        async with memory.parts.upkeep.vector_index_deferred():
            for start in range(0, rows, CHUNK):
                count = min(CHUNK, rows - start)
                turns = [
                    dataclasses.replace(t, created_at=(t.created_at or FIRST) + shift)
                    for t in synthetic_turns(start, count, sessions, rng, heavy_share)
                ]
                await add_with_random_vectors(memory, turns, rng, CHUNK)
                print(f"\r  imported {start + count}/{rows}", end="", flush=True)
        print()
        for s in range(0, min(sessions, 200), 2):  # a few facts in a hundred private chats
            await memory.parts.keeper.save(
                [
                    ExtractedMemory(kind="facts", content=f"用户{s}喜欢第{k}种咖啡")
                    for k in range(3)
                ],
                10_000 + s,
            )
        await memory.parts.upkeep.index_large_sessions()
        # A database that has run a while has been vacuumed: its visibility map lets counts
        # of a session read the session index alone. Right after a bulk load it has not.
        async with memory.parts.database.pool.acquire() as conn:  # bench-only
            await conn.execute("VACUUM (ANALYZE) dialogues")
    finally:
        await memory.aclose()


async def timed(repeat: int, call: Callable[[], Awaitable[httpx.Response]]) -> dict[str, float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        answer = await call()
        samples.append((time.perf_counter() - started) * 1000)
        if answer.status_code != 200:
            raise RuntimeError(f"{answer.status_code}: {answer.text[:300]}")
    return percentiles(samples)


async def measure(port: int, repeat: int) -> dict[str, dict[str, float]]:
    origin = f"http://127.0.0.1:{port}"
    headers = {"Origin": origin, "Sec-Fetch-Site": "same-origin"}
    async with httpx.AsyncClient(
        base_url=origin, headers=headers, trust_env=False, timeout=60
    ) as c:
        login = await c.post("/memory/login", data={"token": TOKEN})
        assert login.status_code == 303, login.text
        csrf = re.search(r'name="csrf" value="([^"]+)"', (await c.get("/memory/bin")).text)
        assert csrf is not None
        heavy = f"{HEAVY[1]}:{HEAVY[0]}"
        typical = str(TYPICAL_USER)
        pages: dict[str, Callable[[], Awaitable[httpx.Response]]] = {
            "overview (charts, 30 days)": lambda: c.get("/memory/"),
            "sessions, first page": lambda: c.get("/memory/sessions"),
            "sessions of one group": lambda: c.get("/memory/sessions", params={"group": "500001"}),
            "session page, typical": lambda: c.get("/memory/session", params={"key": typical}),
            "session page, heavy": lambda: c.get("/memory/session", params={"key": heavy}),
            "keyword search, heavy": lambda: c.get(
                "/memory/session", params={"key": heavy, "q": "咖啡"}
            ),
            "semantic search, heavy": lambda: c.get(
                "/memory/session", params={"key": heavy, "q": "周末去哪里旅行", "mode": "meaning"}
            ),
            "recycle bin": lambda: c.get("/memory/bin"),
            "audit log": lambda: c.get("/memory/audit"),
            "settings": lambda: c.get("/memory/settings"),
            "recall debugger, typical": lambda: c.post(
                "/memory/debug",
                data={"csrf": csrf.group(1), "user": typical, "message": "上周说的咖啡是哪种"},
            ),
        }
        results = {}
        for name, call in pages.items():
            await call()  # warm: first plans, first embedding
            results[name] = await timed(repeat, call)
            print(f"  {name}: {fmt(results[name])}", flush=True)
        return results


async def run(args: argparse.Namespace) -> None:
    print(f"console pages — {args.rows} turns, {args.sessions} sessions, heavy share "
          f"{args.heavy_share}; {machine_line()}")  # fmt: skip
    with bench_data_dir("console") as root:
        started = time.perf_counter()
        # The embedded PostgreSQL of ``root``: built here, then started again by the bot.
        await build_database(root, args.rows, args.sessions, args.heavy_share)
        print(f"  database built in {time.perf_counter() - started:.0f} s")
        bot = await start_bot(
            llm_url=None,
            extra_env={"MEMORY_DATA_DIR": str(root), "MEMORY_CONSOLE_TOKEN": TOKEN},
        )
        try:
            results = await measure(bot.port, args.repeat)
        finally:
            await stop_bot(bot)
            shutil.rmtree(bot.data_dir, ignore_errors=True)
    worst = max(results.items(), key=lambda item: item[1]["p95"])
    print(f"  slowest page at p95: {worst[0]} ({worst[1]['p95']:.1f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=2_000)
    parser.add_argument("--heavy-share", type=float, default=0.25)
    parser.add_argument("--repeat", type=int, default=40)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
