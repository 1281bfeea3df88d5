"""A primary with a synchronous hot standby (``tests.replication``), the memory on the
multi-host DSN the README gives: the primary dies, the standby is promoted, and every turn the
memory acknowledged — stored or spooled — ends up on the new primary, with the same memory
object (no reopen, no restart)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from memory_core import TemporalMemory, open_memory
from memory_core.errors import MemoryCoreError
from memory_core.models import TurnInput
from memory_core.settings import MemorySettings
from memory_core.storage import database
from tests.fakes import HashingEmbedder
from tests.replication import ReplicatedPair
from tests.tcp_proxy import SwitchableProxy, unix_socket_of


def said(text: str, message_id: int) -> TurnInput:
    return TurnInput(user_id=7, role="user", content=text, message_id=message_id, self_id=1)


@pytest.fixture
async def pair() -> AsyncIterator[ReplicatedPair]:
    replicated = ReplicatedPair(synchronous=True)
    try:
        yield await asyncio.to_thread(replicated.start)
    finally:
        await asyncio.to_thread(replicated.close)


async def say(memory: TemporalMemory, text: str, message_id: int, acknowledged: list[str]) -> None:
    """One turn; counted as acknowledged when the memory stored or spooled it (what the bot
    answers after)."""
    outcome = await memory.parts.writer.add_turn(said(text, message_id))
    assert outcome.turn is not None or outcome.spooled, outcome
    acknowledged.append(text)


async def contents_on(dsn: str) -> set[str]:
    conn = await asyncpg.connect(dsn, timeout=10)
    try:
        return {row["content"] for row in await conn.fetch("SELECT content FROM dialogues")}
    finally:
        await conn.close()


async def written_to(memory: TemporalMemory, dsn: str, wanted: list[str]) -> set[str]:
    """Flush the spool until every ``wanted`` turn is on ``dsn`` (bounded: 60 s); what is
    there in the end."""
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(MemoryCoreError):
            await (
                memory.parts.forgetting.flush_spool()
            )  # reconnects; raises while no server takes writes
        stored = await contents_on(dsn)
        if set(wanted) <= stored or time.monotonic() > deadline:
            return stored
        await asyncio.sleep(0.2)


async def test_every_acknowledged_turn_is_on_the_promoted_standby_after_the_primary_is_killed(
    pair: ReplicatedPair, tmp_data_dir: Path, hashing_embedder: HashingEmbedder
) -> None:
    settings = MemorySettings(memory_dsn=pair.dsn(), memory_data_dir=tmp_data_dir)
    memory = await open_memory(settings, embedder=hashing_embedder, maintenance_interval=None)
    acknowledged: list[str] = []
    try:
        for n in range(8):
            await say(memory, f"主库还在时说的第{n}句话", n, acknowledged)

        await asyncio.to_thread(pair.primary.kill)
        # Between the crash and the promotion nothing takes writes: spooled, still answered.
        for n in range(8, 11):
            await say(memory, f"主库刚死时说的第{n}句话", n, acknowledged)

        await asyncio.to_thread(pair.standby.promote)
        for n in range(11, 19):
            await say(memory, f"备库接手后说的第{n}句话", n, acknowledged)

        stored = await written_to(memory, pair.standby.dsn(), acknowledged)
        assert sorted(set(acknowledged) - stored) == []
        # The same memory reads from the new primary too.
        recalled = await memory.parts.retriever.get_contextual_memory(
            7, "备库接手后说的话", top_n=5, now=datetime.now(timezone.utc)
        )
        assert any("备库接手后" in turn.content for turn in recalled)
    finally:
        await memory.aclose()


async def test_a_turn_said_after_a_silent_primary_is_replaced_is_written_to_the_new_one(
    pair: ReplicatedPair, tmp_data_dir: Path, hashing_embedder: HashingEmbedder
) -> None:
    """The primary stops answering without refusing (SIGSTOP on the postmaster and every
    backend: a hung host, a cut network), with connections to it open in the pool. Those
    connections are dropped when a statement on them goes unanswered, not kept for asyncpg's
    cancel request to the same silent server, so the memory reaches the promoted standby."""
    settings = MemorySettings(memory_dsn=pair.dsn(), memory_data_dir=tmp_data_dir)
    memory = await open_memory(settings, embedder=hashing_embedder, maintenance_interval=None)
    acknowledged: list[str] = []
    try:
        for n in range(4):
            await say(memory, f"主库还在时说的第{n}句话", n, acknowledged)

        await asyncio.to_thread(pair.primary.freeze)
        await asyncio.to_thread(pair.standby.promote)
        # Generous: asyncpg alone took over a minute here (bench/RESULTS.md, 2026-12-07).
        deadline = time.monotonic() + 40
        on_new_primary: set[str] = set()
        n = 4
        while not on_new_primary and time.monotonic() < deadline:
            await say(memory, f"主库不出声后说的第{n}句话", n, acknowledged)
            on_new_primary = set(acknowledged[4:]) & await contents_on(pair.standby.dsn())
            n += 1
        assert on_new_primary, f"no turn on the new primary within 40 s ({n - 4} said)"

        stored = await written_to(memory, pair.standby.dsn(), acknowledged)
        assert sorted(set(acknowledged) - stored) == []
    finally:
        # Ended first: a connection still open to the frozen server would wait on its goodbye.
        await asyncio.to_thread(pair.primary.thaw_and_kill)
        await memory.aclose()


class SilentHost:
    """A loopback port that accepts connections and never answers: a hung server, or a host
    behind a cut network, as a client sees it (no refusal, no reset)."""

    def __init__(self) -> None:
        self._server: asyncio.base_events.Server | None = None
        self._held: list[asyncio.StreamWriter] = []
        self.port = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._hold, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _hold(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._held.append(writer)
        while await reader.read(65536):  # swallow the startup message, say nothing
            pass

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._held:
            writer.close()
        await self._server.wait_closed()


async def test_a_silent_first_host_does_not_keep_the_memory_from_the_next_one(
    fresh_dsn: str, tmp_data_dir: Path, hashing_embedder: HashingEmbedder
) -> None:
    silent = SilentHost()
    await silent.start()
    proxy = SwitchableProxy(unix_socket_of(fresh_dsn))
    await proxy.start()
    database = urlsplit(fresh_dsn).path.lstrip("/")
    dsn = f"postgresql://postgres@127.0.0.1:{silent.port},127.0.0.1:{proxy.port}/{database}"
    settings = MemorySettings(memory_dsn=dsn, memory_data_dir=tmp_data_dir)
    try:
        memory = await open_memory(settings, embedder=hashing_embedder, maintenance_interval=None)
        try:
            outcome = await memory.parts.writer.add_turn(said("主库不出声时说的话", 1))
            assert outcome.turn is not None, outcome  # stored on the second host, not spooled
        finally:
            await memory.aclose()
        assert await contents_on(proxy.dsn(database)) == {"主库不出声时说的话"}
    finally:
        await proxy.stop()
        await silent.stop()


async def test_the_next_host_is_tried_beside_a_silent_one_before_its_connect_timeout(
    fresh_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reconnect after the primary went silent does not wait out the silent host's connect
    timeout (an hour here) before trying the next host: it is tried after a head start."""
    monkeypatch.setattr(database, "HOST_CONNECT_TIMEOUT", 3600.0)
    silent = SilentHost()
    await silent.start()
    proxy = SwitchableProxy(unix_socket_of(fresh_dsn))
    await proxy.start()
    name = urlsplit(fresh_dsn).path.lstrip("/")
    dsn = f"postgresql://postgres@127.0.0.1:{silent.port},127.0.0.1:{proxy.port}/{name}"
    try:
        # Bounded so that a failure fails instead of hanging for the hour.
        conn = await asyncio.wait_for(database.HostByHost(dsn)(dsn, timeout=3600), 120)
        try:
            assert await conn.fetchval("SELECT 1") == 1
        finally:
            await conn.close()
    finally:
        await proxy.stop()
        await silent.stop()
