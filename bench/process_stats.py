"""CPU time and memory (RSS; PSS, which adds up across processes) of the bot process, its
worker processes (the pictures' OCR) and its embedded PostgreSQL, read from ``/proc``.

CPU seconds per message are what a loaded machine changes least: wall-clock throughput on a
2-core box shared with other work is a rough figure, the CPU a message costs is not. The event
loop's thread is counted apart from the others so a figure says which part limits throughput.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat_fields(path: Path) -> list[str] | None:
    try:
        raw = path.read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: split after its closing one.
    name = raw[raw.index("(") + 1 : raw.rindex(")")]
    return [name, *raw[raw.rindex(")") + 2 :].split()]


def _cpu_seconds(fields: list[str]) -> float:
    # utime and stime are fields 14 and 15 of stat (1-based), 12 and 13 after the name here.
    return (int(fields[12]) + int(fields[13])) / _TICKS


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of ``pid`` so far: ``main`` (its first thread, the event loop) and
    ``threads`` (all others, ended ones included: the local embedding model's worker, mostly;
    Python 3.11 gives the kernel no thread names to tell them apart)."""
    whole = _stat_fields(Path(f"/proc/{pid}/stat"))
    main = _stat_fields(Path(f"/proc/{pid}/task/{pid}/stat"))
    if whole is None or main is None:
        return {"main": 0.0, "threads": 0.0}
    return {"main": _cpu_seconds(main), "threads": _cpu_seconds(whole) - _cpu_seconds(main)}


def process_cpu(pid: int | None) -> float:
    """CPU seconds of the whole process ``pid`` so far (0 when it is gone or ``None``)."""
    fields = None if pid is None else _stat_fields(Path(f"/proc/{pid}/stat"))
    return 0.0 if fields is None else _cpu_seconds(fields)


def worker_cpu(pid: int) -> float:
    """CPU seconds of ``pid``'s running child processes (the pictures' OCR worker)."""
    total = 0.0
    for proc in Path("/proc").glob("[0-9]*"):
        fields = _stat_fields(proc / "stat")
        if fields is not None and fields[2] == str(pid):
            total += _cpu_seconds(fields)
    return total


def postgres_cpu(data_dir: Path) -> float:
    """CPU seconds of the embedded PostgreSQL under ``data_dir`` (server and its backends,
    the ones still running)."""
    try:
        postmaster = int((data_dir / "pg" / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    total = 0.0
    for proc in Path("/proc").glob("[0-9]*"):
        fields = _stat_fields(proc / "stat")
        if fields is None:
            continue
        if proc.name == str(postmaster) or fields[2] == str(postmaster):
            total += _cpu_seconds(fields)
    return total


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` in MB (0 when it is gone)."""
    try:
        pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return 0.0
    return pages * _PAGE / 1e6


@dataclass
class CpuMeter:
    """CPU used by the bot (by thread kind), its worker processes and its PostgreSQL between
    ``start`` and ``stop``."""

    pid: int
    data_dir: Path
    _bot: dict[str, float] | None = None
    _pg: float = 0.0
    _workers: float = 0.0

    def start(self) -> None:
        self._bot = thread_cpu(self.pid)
        self._pg = postgres_cpu(self.data_dir)
        self._workers = worker_cpu(self.pid)

    def stop(self) -> dict[str, float]:
        assert self._bot is not None, "start() first"
        used = thread_cpu(self.pid)
        figures = {kind: max(0.0, used[kind] - self._bot[kind]) for kind in used}
        figures["postgres"] = max(0.0, postgres_cpu(self.data_dir) - self._pg)
        figures["workers"] = max(0.0, worker_cpu(self.pid) - self._workers)
        return figures


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.1f} / {five:.1f} / {fifteen:.1f}"


async def timed_rounds(
    configs: Mapping[str, T],
    calls: Sequence[Callable[[T], Awaitable[object]]],
    rounds: int,
    data_dir: Path,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Run ``calls`` on each configuration in turn, ``rounds`` times: the wall time of every
    call (seconds), and per round the CPU a call cost on average (this process's threads and
    the embedded PostgreSQL of ``data_dir``), by configuration name."""
    times: dict[str, list[float]] = {name: [] for name in configs}
    cpu: dict[str, list[float]] = {name: [] for name in configs}
    for _ in range(rounds):
        for name, config in configs.items():
            own, pg = thread_cpu(os.getpid()), postgres_cpu(data_dir)
            for call in calls:
                started = time.perf_counter()
                await call(config)
                times[name].append(time.perf_counter() - started)
            spent = sum(thread_cpu(os.getpid()).values()) - sum(own.values())
            spent += postgres_cpu(data_dir) - pg
            cpu[name].append(spent / len(calls))
    return times, cpu


def pss_mb(pid: int) -> float:
    """Proportional memory of ``pid`` in MB: its private pages plus its share of pages it
    shares (PostgreSQL's shared buffers, libraries), so the figures of several processes add
    up to what they take together, which RSS does not (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024 / 1e6
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def _children(pid: int) -> list[int]:
    """``pid``'s descendants (the OCR worker and whatever it starts)."""
    parents: dict[int, list[int]] = {}
    for proc in Path("/proc").glob("[0-9]*"):
        fields = _stat_fields(proc / "stat")
        if fields is not None:
            parents.setdefault(int(fields[2]), []).append(int(proc.name))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def bot_processes(pid: int, data_dir: Path) -> dict[str, list[int]]:
    """Every process of the bot ``pid`` by kind: ``bot``, ``workers`` (its children: the OCR
    worker) and ``postgres`` (the embedded server of ``data_dir``: postmaster and backends,
    which are not the bot's children: pg_ctl starts the postmaster on its own)."""
    try:
        postmaster = int((data_dir / "pg" / "postmaster.pid").read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        postmaster = None
    postgres = [] if postmaster is None else [postmaster, *_children(postmaster)]
    workers = [child for child in _children(pid) if child not in postgres]
    return {"bot": [pid], "workers": workers, "postgres": postgres}


def memory_mb(pid: int, data_dir: Path) -> dict[str, float]:
    """PSS in MB of the bot ``pid``'s processes by kind (``bot_processes``) and ``total``."""
    figures = {
        kind: sum(pss_mb(p) for p in pids) for kind, pids in bot_processes(pid, data_dir).items()
    }
    figures["total"] = sum(figures.values())
    return figures


class MemoryPeak:
    """Samples ``memory_mb`` every ``interval`` seconds in the background; ``peak`` is the
    sample with the highest total, ``highest`` each kind's own highest."""

    def __init__(self, pid: int, data_dir: Path, interval: float = 1.0) -> None:
        self.pid, self.data_dir, self.interval = pid, data_dir, interval
        self.peak: dict[str, float] = {}
        self.highest: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> dict[str, float]:
        figures = memory_mb(self.pid, self.data_dir)
        if figures["total"] > self.peak.get("total", 0.0):
            self.peak = figures
        for kind, value in figures.items():
            self.highest[kind] = max(self.highest.get(kind, 0.0), value)
        return figures

    async def _run(self) -> None:
        while True:
            await asyncio.to_thread(self.sample)
            await asyncio.sleep(self.interval)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.sample()


def memory_line(figures: Mapping[str, float]) -> str:
    return (
        "{total:.0f} MB (bot {bot:.0f}, OCR worker {workers:.0f}, PostgreSQL {postgres:.0f})"
    ).format(**figures)
