"""The embedded PostgreSQL under crashes: killed while the memory is open, a stale or reused
``postmaster.pid``, a handle left by a killed process. Each test runs its own embedded server
in its own folder under /tmp (not the session-wide one of ``tests/conftest.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import asyncpg
import pytest

from memory_core import TemporalMemory, open_memory
from memory_core.errors import DatabaseUnavailableError
from memory_core.models import TurnInput
from memory_core.settings import MemorySettings
from memory_core.storage.embedded_server import (
    SMALL_SERVER_FILE,
    SMALL_SERVER_SETTINGS,
    EmbeddedServer,
    size_for_small_server,
)
from tests.fakes import HashingEmbedder
from tests.pg_processes import (
    kill_postmaster,
    postgres_processes,
    postmaster_pid,
    stop_leftover_server,
)

ROOT = Path(__file__).resolve().parents[2]
LONG_AGO = datetime(2000, 1, 1, tzinfo=timezone.utc)


def said(text: str, message_id: int) -> TurnInput:
    return TurnInput(user_id=7, role="user", content=text, message_id=message_id, self_id=1)


@pytest.fixture(scope="module")
async def template_cluster() -> AsyncIterator[Path]:
    """A cluster made (initdb, migrations) once and stopped; each test starts from a copy, which
    saves initdb's seconds on every test."""
    data_dir = Path(tempfile.mkdtemp(prefix="tm-template-", dir="/tmp"))
    memory = await open_memory(
        MemorySettings(memory_data_dir=data_dir),
        embedder=HashingEmbedder(),
        maintenance_interval=None,
    )
    await memory.aclose()
    yield data_dir / "pg"
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def cluster(template_cluster: Path, tmp_data_dir: Path) -> Iterator[Path]:
    cluster = tmp_data_dir / "pg"
    # cp -a keeps the files' owner (the "pgserver" user when run as root), as a backup would.
    subprocess.run(["cp", "-a", str(template_cluster), str(cluster)], check=True)
    yield cluster
    stop_leftover_server(cluster)  # only does something when a test failed midway


@pytest.fixture
async def open_embedded(
    tmp_data_dir: Path, cluster: Path, hashing_embedder: HashingEmbedder
) -> AsyncIterator[Callable[[], Awaitable[TemporalMemory]]]:
    """Open a memory on the embedded server of ``tmp_data_dir`` (no DSN, no background loop);
    every memory is closed at the end (closing twice is harmless)."""
    opened: list[TemporalMemory] = []

    async def opener() -> TemporalMemory:
        memory = await open_memory(
            MemorySettings(memory_data_dir=tmp_data_dir),
            embedder=hashing_embedder,
            maintenance_interval=None,
        )
        opened.append(memory)
        return memory

    yield opener
    for memory in opened:
        await memory.aclose()


async def stored_contents(memory: TemporalMemory, expected_rows: int) -> list[str]:
    """Poll until ``expected_rows`` rows are stored; a generous cap, not a timing assertion."""
    for _ in range(1200):
        with contextlib.suppress(DatabaseUnavailableError):
            if (await memory.stats()).total_rows == expected_rows:
                break
        await asyncio.sleep(0.1)
    turns = await memory.parts.retriever.recent_turns(7, None, limit=10, since=LONG_AGO)
    return [turn.content for turn in turns]


async def test_a_killed_embedded_server_is_started_again_and_the_turn_spooled_meanwhile_is_stored(
    open_embedded, cluster
):
    memory = await open_embedded()
    assert (await memory.parts.writer.add_turn(said("崩溃之前说的话", 1))).turn is not None
    dead = await kill_postmaster(cluster)
    outcome = await memory.parts.writer.add_turn(said("崩溃期间说的话", 2))
    assert outcome.spooled and outcome.turn is None
    memory.start_maintenance(interval=0.1)
    assert await stored_contents(memory, 2) == ["崩溃之前说的话", "崩溃期间说的话"]
    assert postmaster_pid(cluster) != dead
    assert (await memory.stats()).spooled_turns == 0


async def test_after_a_crash_and_a_restart_closing_the_memory_leaves_no_postgres_running(
    open_embedded, cluster
):
    memory = await open_embedded()
    dead = await kill_postmaster(cluster)
    assert (await memory.parts.writer.add_turn(said("重启期间", 1))).spooled
    memory.start_maintenance(interval=0.1)
    assert await stored_contents(memory, 1) == ["重启期间"]
    assert postmaster_pid(cluster) != dead
    assert postgres_processes(cluster)
    await memory.aclose()
    assert postgres_processes(cluster) == []
    assert not (cluster / "postmaster.pid").exists()


def test_a_server_that_cannot_start_is_retried_with_doubling_waits_and_comes_back_once_fixed(
    cluster, caplog
):
    config = cluster / "postgresql.conf"
    good = config.read_text()
    config.write_text(good + "this line is no setting\n")  # PostgreSQL refuses to start
    server = EmbeddedServer(cluster)
    try:
        with caplog.at_level(logging.INFO, logger="memory_core"):
            assert [server.restart_if_dead() for _ in range(4)] == [1.0, 2.0, 4.0, 8.0]
            assert not server.running()
            config.write_text(good)
            assert server.restart_if_dead() is None
            assert server.running()
            assert server.restart_if_dead() is None  # running: nothing to do, nothing logged
        lines = [r.getMessage() for r in caplog.records if r.name.startswith("memory_core")]
        assert len(lines) == 1 + 4 + 1  # found down, each failed attempt, back
        assert "is back (attempt 5)" in lines[-1]
    finally:
        server.stop()
    assert postgres_processes(cluster) == []


@contextlib.contextmanager
def sleeping_process() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "300"])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


@contextlib.contextmanager
def pid_that_is_no_postmaster(owner: str) -> Iterator[int]:
    if owner == "this test process":
        yield os.getpid()
        return
    with sleeping_process() as sleeper:
        if owner == "a process that has exited":
            sleeper.kill()
            sleeper.wait()
        yield sleeper.pid


@pytest.mark.parametrize(
    "owner", ["this test process", "a sleep process", "a process that has exited"]
)
async def test_a_postmaster_pid_naming_a_process_that_is_no_postmaster_of_the_folder_is_removed(
    open_embedded, cluster, owner
):
    memory = await open_embedded()
    lock_file = cluster / "postmaster.pid"
    lines = lock_file.read_text().splitlines(keepends=True)
    await memory.aclose()
    assert not lock_file.exists()
    # As after a container restart: the file survived, its PID now names another process.
    with pid_that_is_no_postmaster(owner) as pid:
        lock_file.write_text("".join([f"{pid}\n", *lines[1:]]))
        memory = await open_embedded()
        assert (await memory.parts.writer.add_turn(said("照样能存", 1))).turn is not None
        assert postmaster_pid(cluster) != pid


async def test_a_running_postmaster_of_the_folder_is_joined_and_stops_with_its_last_user(
    open_embedded, cluster
):
    first = await open_embedded()
    running = postmaster_pid(cluster)
    second = await open_embedded()
    assert postmaster_pid(cluster) == running
    await first.aclose()
    assert postgres_processes(cluster)  # the second memory still uses it
    assert (await second.parts.writer.add_turn(said("还在用", 1))).turn is not None
    await second.aclose()
    assert postgres_processes(cluster) == []


def start_in_other_process(data_dir: Path) -> subprocess.Popen[str]:
    """Another process (a bot) holding the same embedded server; waits until it has started."""
    # SIGINT (how the test stops it) is ignored in a process started in the background by a
    # shell without job control (``make test &``, some CI runners) and the child inherits that;
    # it would then never exit. Python's own handler is put back explicitly.
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from pathlib import Path\n"
        "from memory_core.storage.embedded_server import EmbeddedServer, embedded_cluster_dir\n"
        "EmbeddedServer(embedded_cluster_dir(Path(sys.argv[1]))).start()\n"
        "print('started', flush=True)\n"
        "time.sleep(300)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(data_dir)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "started"
    return process


async def test_a_user_killed_with_sigkill_does_not_keep_the_server_running_after_a_clean_stop(
    open_embedded, cluster, tmp_data_dir
):
    other = start_in_other_process(tmp_data_dir)
    other.kill()  # -9: it never takes its PID out of the handle list
    other.wait()
    assert other.pid in json.loads((cluster / ".handle_pids.json").read_text())
    memory = await open_embedded()  # joins the server the killed process started
    assert (await memory.parts.writer.add_turn(said("接手", 1))).turn is not None
    await memory.aclose()
    assert postgres_processes(cluster) == []


async def test_a_handle_whose_pid_was_reused_by_a_younger_process_does_not_keep_the_server(
    open_embedded, cluster
):
    memory = await open_embedded()
    await memory.aclose()
    handles = cluster / ".handle_pids.json"
    with sleeping_process() as sleeper:
        # The list was written before this process existed: its PID is someone else's now.
        handles.write_text(json.dumps([sleeper.pid]))
        os.utime(handles, (0, 1_000_000_000))
        memory = await open_embedded()
        await memory.aclose()
        assert postgres_processes(cluster) == []


async def test_another_process_still_using_the_server_keeps_it_running_after_our_stop(
    open_embedded, cluster, tmp_data_dir
):
    other = start_in_other_process(tmp_data_dir)
    try:
        memory = await open_embedded()
        await memory.aclose()
        assert postgres_processes(cluster)
    finally:
        other.send_signal(signal.SIGINT)  # exits through its exit handler: the last user
        other.wait(timeout=120)  # a stall fails here with a reason instead of hanging the suite
    for _ in range(600):  # bounded wait, not a timing assertion
        if not postgres_processes(cluster):
            break
        await asyncio.sleep(0.1)
    assert postgres_processes(cluster) == []


async def test_a_cluster_made_before_is_sized_for_a_small_server_at_its_next_start(cluster):
    # As an older version left it: initdb's postgresql.conf alone (128 MB of shared buffers).
    (cluster / SMALL_SERVER_FILE).unlink(missing_ok=True)
    conf = cluster / "postgresql.conf"
    kept = [line for line in conf.read_text().splitlines() if SMALL_SERVER_FILE not in line]
    conf.write_text("\n".join(kept) + "\n")
    server = EmbeddedServer(cluster)
    dsn = await asyncio.to_thread(server.start)
    try:
        connection = await asyncpg.connect(dsn)
        try:
            shared_buffers = await connection.fetchval("SHOW shared_buffers")
        finally:
            await connection.close()
    finally:
        await asyncio.to_thread(server.stop)
    size_for_small_server(cluster)  # a later start adds nothing twice

    assert shared_buffers == SMALL_SERVER_SETTINGS["shared_buffers"]
    assert conf.read_text().count(SMALL_SERVER_FILE) == 1
