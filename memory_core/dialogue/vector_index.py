"""HNSW vector indexes for large sessions only (``MEMORY_VECTOR_INDEX``).

Recall searches a session exactly while it holds at most ``MEMORY_EXACT_SEARCH_MAX_ROWS`` turns,
which stays fast because it reads only that session's rows. A larger session gets an HNSW index
of its own — a partial index over its rows — so that:

- only that session's inserts pay for the graph (a table-wide index cost every insert ~10 ms at
  1M rows, and about as much disk as the vectors themselves);
- a search in it needs no filtering by session (a table-wide graph had to be walked past the
  other sessions' rows);
- building it takes time in proportion to the session, not to the table.

With ``auto`` (default) the index is built the first time a recall meets a session above the
limit — in the background, without blocking writes; recall stays exact until it is ready — and
after a bulk import or a re-embed for every such session. ``never`` drops them all: every search
is exact.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from ..errors import StorageError
from ..settings import VectorIndexMode
from .index_store import PgVectorIndexStore, parse_session_index_name, session_index_name

log = logging.getLogger(__name__)

RETRY_AFTER_FAILURE = 600.0  # seconds before a failed background build is tried again
# Two concurrent builds on one table deadlock (each waits for the other's transaction), so a
# build waits while another connection (another bot or CLI process) is building.
RETRY_WHILE_BUSY = 60.0


class VectorIndex:
    """Which sessions have a usable HNSW index, and the builds of new ones.

    Holds no database: each call works on the index store it is given, because on
    connecting the indexes are settled on the new pool before ``Database`` hands it out
    (nothing may use a database whose embedding model is not yet checked)."""

    def __init__(self, *, mode: VectorIndexMode, dim: int, exact_max_rows: int) -> None:
        self.mode = mode
        self.dim = dim
        self.exact_max_rows = exact_max_rows
        self.indexed: set[str] = set()  # session keys whose index exists and is valid
        self._builds: dict[str, asyncio.Task[None]] = {}
        self._retry_at: dict[str, float] = {}
        self._one_build_at_a_time = asyncio.Lock()  # two concurrent builds would deadlock

    def serves(self, session_key: str, session_rows: int) -> bool:
        """Whether this session is searched through its index (else: exactly)."""
        return session_rows > self.exact_max_rows and session_key in self.indexed

    @property
    def building(self) -> int:
        """How many sessions' indexes are being built in the background."""
        return sum(1 for task in self._builds.values() if not task.done())

    async def settle(self, store: PgVectorIndexStore, *, check_sessions: bool = False) -> None:
        """Make the indexes agree with the settings: on opening, and after bulk work.

        Keeps the valid indexes of this dimension and drops the others (broken ones, another
        dimension's, the table-wide index of earlier versions). ``check_sessions`` (after a bulk
        import or re-embed) also builds, blocking, the index of every session above the limit.
        """
        await self.cancel_builds()
        self.indexed.clear()
        if self.mode == "never":
            await store.drop_vector_indexes()
            return
        unwanted = []
        for name, valid in (await store.vector_indexes()).items():
            parsed = parse_session_index_name(name)
            if valid and parsed is not None and parsed[0] == self.dim:
                self.indexed.add(parsed[1])
            else:
                unwanted.append(name)
        if unwanted:
            await store.drop_vector_indexes(unwanted)
        if not check_sessions:
            return
        for session_key, rows in (await store.large_sessions(self.exact_max_rows)).items():
            if session_key in self.indexed or session_index_name(self.dim, session_key) is None:
                continue
            started = time.perf_counter()
            await store.create_session_vector_index(self.dim, session_key)
            self.indexed.add(session_key)
            log.info(
                "vector index of session %s (%d turns) built in %.1f s",
                session_key,
                rows,
                time.perf_counter() - started,
            )

    async def suspend(self, store: PgVectorIndexStore) -> None:
        """Drop every index for bulk work; :meth:`settle` afterwards builds the wanted ones."""
        await self.cancel_builds()
        await store.drop_vector_indexes()
        self.indexed.clear()

    def request(self, store: PgVectorIndexStore, session_key: str) -> None:
        """A recall met this session above the limit: build its index in the background."""
        if self.mode == "never" or session_key in self.indexed:
            return
        if session_key in self._builds and not self._builds[session_key].done():
            return
        if time.monotonic() < self._retry_at.get(session_key, 0.0):
            return
        if session_index_name(self.dim, session_key) is None:
            return  # not a key this version makes; searched exactly
        log.info(
            "session %s holds more than %d turns: building its vector index in the background "
            "(its recall stays exact meanwhile)",
            session_key,
            self.exact_max_rows,
        )
        self._builds[session_key] = asyncio.create_task(self._build(store, session_key))

    async def wait_built(self) -> None:
        """Wait for the background builds started by :meth:`request`."""
        for task in list(self._builds.values()):
            await asyncio.shield(task)

    async def cancel_builds(self) -> None:
        for task in self._builds.values():
            task.cancel()
        for task in self._builds.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._builds.clear()

    async def _build(self, store: PgVectorIndexStore, session_key: str) -> None:
        async with self._one_build_at_a_time:
            await self._build_now(store, session_key)

    async def _build_now(self, store: PgVectorIndexStore, session_key: str) -> None:
        started = time.perf_counter()
        try:
            if await store.index_build_running():  # by another process
                self._retry_at[session_key] = time.monotonic() + RETRY_WHILE_BUSY
                log.info("another index build is running; session %s waits its turn", session_key)
                return
            await store.create_session_vector_index(self.dim, session_key, concurrently=True)
        except (StorageError, asyncio.TimeoutError) as exc:
            self._retry_at[session_key] = time.monotonic() + RETRY_AFTER_FAILURE
            log.warning(
                "building the vector index of session %s failed (retried in %.0f min): %s",
                session_key,
                RETRY_AFTER_FAILURE / 60,
                exc,
            )
            return
        self.indexed.add(session_key)
        log.info(
            "vector index of session %s ready after %.1f s",
            session_key,
            time.perf_counter() - started,
        )
