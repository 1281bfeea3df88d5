"""The real bot with its web console on, over a database seeded through the core: two people in
a private chat and a group, a distilled fact each. Used by the console's HTTP and browser tests."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import asyncpg
import httpx

from memory_core import open_memory
from memory_core.conversation.engine import recall_metrics
from memory_core.distill.memory import ExtractedMemory
from memory_core.settings import MemorySettings
from memory_core.storage.counters import PgCounterStore
from tests.conftest import dsn_for_database, new_database
from tests.core.console.test_console import store_chat
from tests.model_graphs import keep_graphs, share_graphs
from tests.plugin.wire import BotProcess, start_bot, stop_bot

CONSOLE_TOKEN = "console-test-token-7f3a"
ALICE, BOB, GROUP = 2001, 2002, 6006
XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'
SEEDED = [
    (ALICE, None, "user", "我家的狗叫旺财，很喜欢吃骨头", "阿丽"),
    (ALICE, None, "assistant", "旺财真可爱", None),
    (ALICE, None, "user", "下周三我要去杭州出差", "阿丽"),
    (BOB, None, "user", "我家的狗叫大黄，也喜欢骨头", XSS),
    (BOB, GROUP, "user", "群里问问：狗粮哪家好", "波波"),
    (ALICE, GROUP, "user", "我推荐骨头形状的狗粮", "丽丽"),
]
ALICE_FACT = "用户养了一条狗叫旺财"
RECALL_TIMES = (40.0, 60.0, 150.0, 420.0)
BOB_FACT = "用户养了一条狗叫大黄" + XSS


@dataclass
class ConsoleBot:
    bot: BotProcess
    dsn: str

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.bot.port}/memory"

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{self.bot.port}", trust_env=False, timeout=60
        )

    @contextlib.asynccontextmanager
    async def logged_in(self) -> AsyncIterator[httpx.AsyncClient]:
        """A client holding a session cookie, sending the headers a browser sends."""
        async with self.client() as client:
            client.headers.update(same_origin(self))
            answer = await client.post("/memory/login", data={"token": CONSOLE_TOKEN})
            assert answer.status_code == 303, answer.text
            yield client


def same_origin(wire: ConsoleBot) -> dict[str, str]:
    return {"Origin": f"http://127.0.0.1:{wire.bot.port}", "Sec-Fetch-Site": "same-origin"}


async def seed(dsn: str, data_dir: Path) -> None:
    """Store the turns and facts with the bot's own embedding model (the local one)."""
    share_graphs(data_dir)  # the local model's graph, built once per run
    memory = await open_memory(
        MemorySettings(memory_dsn=dsn, memory_data_dir=data_dir), maintenance_interval=None
    )
    start = datetime.now(timezone.utc) - timedelta(days=2)
    try:
        await store_chat(memory, SEEDED, start)
        await memory.parts.keeper.save(
            [ExtractedMemory(kind="facts", content=ALICE_FACT)], ALICE, stated_at=start
        )
        await memory.parts.keeper.save(
            [ExtractedMemory(kind="facts", content=BOB_FACT)], BOB, stated_at=start
        )
        counters = memory.parts.database.store(PgCounterStore)
        for milliseconds in RECALL_TIMES:  # replies two days ago, for the latency chart
            day = start.astimezone(memory.parts.tz).date()
            await counters.bump(day, recall_metrics(milliseconds))
    finally:
        await memory.aclose()
        keep_graphs(data_dir)


SEEDED_TEMPLATE = "tm_console_seeded"
"""A copy of the run's migrated template, seeded (``seed``) once per test server: each console
bot's database is a copy of it (seeding loads the local model and embeds every line)."""
_seeding = asyncio.Lock()
_seeded_on: set[str] = set()


async def seeded_template(server_dsn: str, template: str, tmp_dir: Path) -> str:
    async with _seeding:
        if server_dsn not in _seeded_on:
            admin = await asyncpg.connect(server_dsn)
            try:
                await admin.execute(f'CREATE DATABASE "{SEEDED_TEMPLATE}" TEMPLATE "{template}"')
            finally:
                await admin.close()
            await seed(dsn_for_database(server_dsn, SEEDED_TEMPLATE), tmp_dir)
            _seeded_on.add(server_dsn)
    return SEEDED_TEMPLATE


@contextlib.asynccontextmanager
async def console_bot(
    server_dsn: str, template: str, tmp_dir: Path, extra_env: dict[str, str] | None = None
) -> AsyncIterator[ConsoleBot]:
    """The bot over a copy of the run's migrated ``template``, seeded (``seed``), with
    ``extra_env`` on top of its console settings."""
    seeded = await seeded_template(server_dsn, template, tmp_dir)
    async with new_database(server_dsn, template=seeded) as dsn:
        bot = await start_bot(
            llm_url=None,
            extra_env={
                "MEMORY_DSN": dsn,
                "MEMORY_CONSOLE_TOKEN": CONSOLE_TOKEN,
                # On a loaded machine the local embedder can miss the 3 s query deadline, and
                # the debugger would fall back to keyword-only recall; these tests are about
                # what the embeddings find, not about the deadline (tested elsewhere).
                "EMBEDDING_QUERY_DEADLINE": "60",
                "EMBEDDING_STORE_DEADLINE": "60",
                **(extra_env or {}),
            },
        )
        try:
            yield ConsoleBot(bot=bot, dsn=dsn)
        finally:
            await stop_bot(bot)
            log = bot.log_text()
            shutil.rmtree(bot.data_dir, ignore_errors=True)
            assert "Traceback" not in log, log[log.index("Traceback") - 2000 :][:6000]
