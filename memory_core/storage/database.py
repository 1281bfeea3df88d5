"""Where the database comes from (embedded server or a DSN), migrations, and the pool."""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import asyncpg
from pgvector.asyncpg import register_vector

from ..errors import ConfigError, DatabaseUnavailableError, PgvectorMissingError, StorageError
from ..resources import MIGRATIONS_DIR
from .dsn_options import split_connect_timeout
from .embedded_server import EmbeddedServer

log = logging.getLogger(__name__)

MIGRATION_LOCK_KEY = 0x7E3A_11_2024  # any constant shared by every process of this project
MIN_PGVECTOR = (0, 8, 0)
_MIGRATION_NAME = re.compile(r"^(\d+)_[\w-]+\.sql$")

# Errors that mean "the server is not reachable right now" rather than "this query is wrong".
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    # A connection whose server died while it was being set up (seen when the embedded
    # server is killed under load): "cannot switch to state ...; another operation is in
    # progress". Unusable, like a lost one.
    asyncpg.exceptions.InternalClientError,
)


@dataclass(frozen=True)
class DatabaseLocation:
    """A DSN to connect to, and a readable description of it for the logs."""

    dsn: str
    description: str


async def locate_database(dsn: str | None, embedded: EmbeddedServer | None) -> DatabaseLocation:
    """Start (or join) the ``embedded`` server when given, else use ``dsn``."""
    if embedded is not None:
        return DatabaseLocation(
            dsn=await asyncio.to_thread(embedded.start), description=embedded.description
        )
    if not dsn:
        raise ConfigError("no MEMORY_DSN and no embedded PostgreSQL")
    return DatabaseLocation(dsn=dsn, description=_redact(dsn))


def _redact(dsn: str) -> str:
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", dsn)


def list_migrations(directory: Path = MIGRATIONS_DIR) -> list[tuple[int, str, str]]:
    """``(version, name, sql)`` of every migration file, in version order."""
    if not directory.is_dir():
        raise ConfigError(f"migrations folder not found: {directory}")
    found = []
    for path in sorted(directory.iterdir()):
        match = _MIGRATION_NAME.match(path.name)
        if match:
            found.append((int(match.group(1)), path.name, path.read_text(encoding="utf-8")))
    versions = [version for version, _, _ in found]
    if len(versions) != len(set(versions)):
        raise ConfigError(f"two migrations share a number in {directory}")
    return sorted(found)


async def ensure_pgvector(conn: asyncpg.Connection) -> str:
    """Create the vector extension if needed and check its version (>= 0.8 for iterative scans)."""
    available = await conn.fetchval(
        "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
    )
    if available is None:
        raise PgvectorMissingError(
            "the pgvector extension is not installed in this PostgreSQL server. Install pgvector "
            ">= 0.8 on the server, or leave MEMORY_DSN empty to use the embedded PostgreSQL."
        )
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    except asyncpg.exceptions.InsufficientPrivilegeError as exc:
        raise PgvectorMissingError(
            "pgvector is installed but this database user may not enable it; run "
            "'CREATE EXTENSION vector;' once as a superuser in this database."
        ) from exc
    version: str = await conn.fetchval(
        "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
    )
    if _version_tuple(version) < MIN_PGVECTOR:
        raise PgvectorMissingError(
            f"pgvector {version} is too old; TemporalMemory needs >= 0.8 (iterative index "
            "scans keep session-filtered searches complete). Run 'ALTER EXTENSION vector UPDATE;' "
            "after upgrading the package on the server."
        )
    return version


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


async def apply_migrations(conn: asyncpg.Connection, directory: Path = MIGRATIONS_DIR) -> list[str]:
    """Apply pending migrations in order under an advisory lock; return the names applied."""
    migrations = list_migrations(directory)
    applied_now: list[str] = []
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
    try:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version integer PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {row["version"] for row in await conn.fetch("SELECT version FROM schema_migrations")}
        for version, name, sql in migrations:
            if version in done:
                continue
            async with conn.transaction():
                await conn.execute(sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", version, name
                )
            log.info("applied migration %s", name)
            applied_now.append(name)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)
    return applied_now


async def _init_connection(conn: asyncpg.Connection) -> None:
    await register_vector(conn)


async def prepare_database(dsn: str, migrations_dir: Path = MIGRATIONS_DIR) -> str:
    """Check pgvector and migrate on a plain connection; return the pgvector version."""
    dsn, connect_timeout = split_connect_timeout(dsn)
    try:
        conn = await HostByHost(dsn, connect_timeout)(dsn, timeout=connect_timeout or 15)
    except CONNECTION_ERRORS as exc:
        raise DatabaseUnavailableError(f"cannot connect to PostgreSQL: {exc}") from exc
    except asyncpg.PostgresError as exc:
        raise StorageError(f"PostgreSQL refused the connection: {exc}") from exc
    try:
        version = await ensure_pgvector(conn)
        await apply_migrations(conn, migrations_dir)
        return version
    finally:
        await conn.close()


async def _leave_session_as_is(conn: asyncpg.Connection) -> None:
    """Pool reset on release: nothing beyond what asyncpg always does (an open transaction is
    rolled back, listeners dropped).

    asyncpg's default reset (``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL``) is
    one more round trip on every release — an eighth of the event loop's time under load
    (bench/RESULTS.md, 2026-12-01) — undoing what this code never leaves on a pooled
    connection: settings are ``SET LOCAL`` (gone with the transaction), the only advisory lock
    (migrations) is taken on a connection of its own, and nothing listens or holds a cursor.
    Code that changes session state on a pooled connection must undo it itself."""


class _OneLineConnectionErrors(logging.Filter):
    """asyncpg's pool logs a full traceback each time it retries a lost connection (every
    1 s up to every 60 s while the server is down); the reason fits on one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, CONNECTION_ERRORS):
            record.msg = f"{record.getMessage()} ({type(error).__name__}: {error})"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


_POOL_LOG_FILTER = _OneLineConnectionErrors()


STATEMENT_TIMEOUT = 5.0
"""Seconds a pooled statement may go unanswered unless it names its own timeout: what the
bot runs for a message (a row, a session's recall) takes milliseconds, and a server silent
this long is treated as gone (``pg.pooled`` drops the connection; a turn goes to the spool).
Well inside the reply deadline, so a silent primary costs a reply seconds, not the reply."""
# A pooled connection unused this long is closed (asyncpg's default: 300 s): each one is a
# PostgreSQL backend of ~7 MB (its catalog caches and prepared statements), so after a busy
# minute the pool shrinks back to one instead of holding ten for five minutes.
IDLE_CONNECTION_LIFETIME = 60.0

BULK_TIMEOUT = 600.0
"""Statements whose work grows with the data — deleting a person's or a session's memory,
the purge, counts over whole tables, exports, backfills — and may wait for locks: they name
this timeout."""

HOST_CONNECT_TIMEOUT = 5.0
"""Seconds one host of a multi-host DSN gets to accept a connection before the next is tried
(libpq's ``connect_timeout`` is per host too)."""


def dsn_hosts(dsn: str) -> list[tuple[str, int | None]]:
    """The ``(host, port)`` pairs a URL DSN names (``postgresql://u@h1:5432,h2:5433/db``), in
    order; one pair or none (a socket folder in ``?host=``) for a single server."""
    netloc = urlsplit(dsn).netloc.rpartition("@")[2]
    pairs: list[tuple[str, int | None]] = []
    for spec in filter(None, netloc.split(",")):
        if spec.startswith("["):  # [::1]:5432
            host, _, rest = spec[1:].partition("]")
            port = rest.removeprefix(":")
        else:
            host, _, port = spec.partition(":")
        pairs.append((unquote(host), int(port) if port else None))
    return pairs


HOST_HEAD_START = 1.0
"""Seconds a host of a multi-host DSN has to itself before the next is tried beside it."""


class HostByHost:
    """``asyncpg.connect`` for a DSN that names several servers (a primary and its standbys),
    giving each host its own ``HOST_CONNECT_TIMEOUT``, the host that worked last tried first.

    asyncpg tries the hosts in order under one timeout for all: a primary that stops answering
    without refusing (a hung server, a dead host, a cut network) used it up, and the promoted
    standby after it was never tried (bench/RESULTS.md, 2026-12-07, failover). Refused
    connections and servers that do not match ``target_session_attrs`` move on to the next
    host at once, as asyncpg does; a host silent for ``HOST_HEAD_START`` gets the next one
    tried beside it (as browsers do with addresses), so a primary gone silent costs a
    reconnect one second, not five; the first host to accept, in order, wins. A DSN with one
    host is asyncpg's own connect.
    """

    def __init__(self, dsn: str, host_timeout: float | None = None) -> None:
        """``host_timeout``: the DSN's ``connect_timeout``, if it names one."""
        self._hosts = dsn_hosts(dsn)
        self._host_timeout = host_timeout or HOST_CONNECT_TIMEOUT
        self._last_good = 0

    async def __call__(self, dsn: str, **kwargs: Any) -> asyncpg.Connection:
        if len(self._hosts) < 2:
            single: asyncpg.Connection = await asyncpg.connect(dsn, **kwargs)
            return single
        timeout = min(float(kwargs.pop("timeout", self._host_timeout)), self._host_timeout)
        order = [self._last_good, *(i for i in range(len(self._hosts)) if i != self._last_good)]
        waiting = list(order)
        trying: dict[asyncio.Task[asyncpg.Connection], int] = {}
        failure: BaseException | None = None
        try:
            while waiting or trying:
                if waiting and not trying:  # nothing in flight: the next host at once
                    self._try(trying, waiting.pop(0), dsn, timeout, kwargs)
                done, _ = await asyncio.wait(
                    trying,
                    timeout=HOST_HEAD_START if waiting else None,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if not done:  # silent so far: the next host beside it
                    self._try(trying, waiting.pop(0), dsn, timeout, kwargs)
                for task in sorted(done, key=lambda t: order.index(trying[t])):
                    index = trying.pop(task)
                    try:
                        conn = task.result()
                    except CONNECTION_ERRORS as exc:  # also TargetServerAttributeNotMatched
                        failure = exc
                        continue
                    self._last_good = index
                    return conn
            assert failure is not None
            raise failure
        finally:
            for task in trying:  # lost the race, or the caller gave up
                task.cancel()
                task.add_done_callback(_drop_unwanted)

    def _try(
        self,
        trying: dict[asyncio.Task[asyncpg.Connection], int],
        index: int,
        dsn: str,
        timeout: float,
        kwargs: dict[str, Any],
    ) -> None:
        host, port = self._hosts[index]
        attempt = asyncpg.connect(dsn, host=host, port=port, timeout=timeout, **kwargs)
        trying[asyncio.ensure_future(attempt)] = index


def _drop_unwanted(task: asyncio.Task[asyncpg.Connection]) -> None:
    """A connect that lost the race: its connection, if it made one, is closed."""
    if not task.cancelled() and task.exception() is None:
        task.result().terminate()


# Connections of the memory's pool: MEMORY_POOL_SIZE until 2026-12-07, a key no operator had
# reason to change, taken out of `.env.prod` (at its 100 keys) to make room for one that is.
POOL_SIZE = 10


async def create_pool(dsn: str, max_size: int = POOL_SIZE, **kwargs: Any) -> asyncpg.Pool:
    """A pool whose connections know the vector types (binary codecs), connecting host by
    host (``HostByHost``)."""
    pool_log = logging.getLogger("asyncpg.pool")
    if _POOL_LOG_FILTER not in pool_log.filters:
        pool_log.addFilter(_POOL_LOG_FILTER)
    # asyncpg's stubs spell out every keyword of ``connect``; it is called with the same ones.
    dsn, connect_timeout = split_connect_timeout(dsn)
    connect: Any = HostByHost(dsn, connect_timeout)
    try:
        pool: asyncpg.Pool | None = await asyncpg.create_pool(
            dsn,
            min_size=1,
            max_size=max_size,
            init=_init_connection,
            reset=_leave_session_as_is,
            command_timeout=STATEMENT_TIMEOUT,
            max_inactive_connection_lifetime=IDLE_CONNECTION_LIFETIME,
            timeout=connect_timeout or 10,
            connect=connect,
            **kwargs,
        )
    except CONNECTION_ERRORS as exc:
        raise DatabaseUnavailableError(f"cannot connect to PostgreSQL: {exc}") from exc
    assert pool is not None
    return pool
