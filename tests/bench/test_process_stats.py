"""The memory figure of ``bench.bot_throughput`` counts every process of the bot: its own, its
children (the OCR worker), and the embedded PostgreSQL's postmaster with its backends, which
are not the bot's children."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import asyncpg

from bench.process_stats import bot_processes, memory_mb


async def test_the_bot_s_processes_are_itself_its_children_and_its_postgres_server(
    pg_server_dsn: str,
) -> None:
    cluster = Path(parse_qs(urlsplit(pg_server_dsn).query)["host"][0])  # the socket is there
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(60)"
    )
    conn = await asyncpg.connect(pg_server_dsn)  # a backend of the server
    try:
        backend = await conn.fetchval("SELECT pg_backend_pid()")
        found = bot_processes(os.getpid(), cluster.parent)
        assert child.pid in found["workers"]
        assert backend in found["postgres"] and backend not in found["workers"]
        figures = memory_mb(os.getpid(), cluster.parent)
        assert figures["bot"] > 0 and figures["postgres"] > 0 and figures["workers"] > 0
        assert figures["total"] == figures["bot"] + figures["workers"] + figures["postgres"]
    finally:
        await conn.close()
        child.kill()
        await child.wait()
