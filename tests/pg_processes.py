"""Look at the embedded server's processes from outside, through /proc (as ``ps`` would):
never through the code under test."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path


def postmaster_pid(cluster: Path) -> int:
    return int((cluster / "postmaster.pid").read_text().splitlines()[0])


def postgres_processes(cluster: Path) -> list[int]:
    """Live (not zombie) ``postgres`` processes working in ``cluster``: the postmaster and its
    children, whose command lines no longer name the folder but whose working folder is it."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            state = stat.rsplit(")", 1)[1].split()[0]
            if (entry / "comm").read_text().strip() != "postgres" or state == "Z":
                continue
            if Path(os.readlink(entry / "cwd")) == cluster:
                found.append(int(entry.name))
    return found


async def kill_postmaster(cluster: Path, timeout: float = 60.0) -> int:
    """SIGKILL the postmaster of ``cluster`` (an OOM kill, a crash); return once every process
    of the server has exited, so nothing can answer a query any more. Returns the dead PID."""
    pid = postmaster_pid(cluster)
    os.kill(pid, signal.SIGKILL)
    for _ in range(int(timeout / 0.05)):  # bounded wait, not a timing assertion
        if not postgres_processes(cluster):
            return pid
        await asyncio.sleep(0.05)
    raise AssertionError(f"processes of the killed server still run: {postgres_processes(cluster)}")


def stop_leftover_server(cluster: Path) -> None:
    """After a failed test: stop the server a test left running, by its own pid file."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        os.kill(postmaster_pid(cluster), signal.SIGINT)  # PostgreSQL's fast shutdown
