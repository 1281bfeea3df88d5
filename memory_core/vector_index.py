"""When the HNSW vector index exists (``MEMORY_VECTOR_INDEX``).

Recall searches a session exactly while it holds at most ``MEMORY_EXACT_SEARCH_MAX_ROWS`` rows;
only larger sessions use the HNSW index. The index costs about as much disk as the vectors
themselves (2 KB a row at 1024-d) and halves the speed of inserts, so by default (``auto``) it is
built only once some session needs it:

- ``auto``: kept if it exists; built the first time a recall meets a session above the limit
  (in the background, without blocking writes; that recall and the following ones search exactly
  until it is ready), and after a bulk import or a re-embed that leaves such a session;
- ``always``: built when the memory opens, as before;
- ``never``: dropped; every session is searched exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from .errors import StorageError
from .settings import VectorIndexMode
from .store import PgDialogueStore, vector_index_name

log = logging.getLogger(__name__)

RETRY_AFTER_FAILURE = 600.0  # seconds before a failed background build is tried again


class VectorIndex:
    """The state of the HNSW index for one embedding dimension, and its builds."""

    def __init__(self, *, mode: VectorIndexMode, dim: int, exact_max_rows: int) -> None:
        self.mode = mode
        self.dim = dim
        self.exact_max_rows = exact_max_rows
        self.ready = False  # the index exists and is valid
        self._build: asyncio.Task[None] | None = None
        self._retry_at = 0.0

    def serves(self, session_rows: int) -> bool:
        """Whether a session of this size is searched through the index."""
        return self.ready and session_rows > self.exact_max_rows

    async def settle(self, store: PgDialogueStore, *, check_sessions: bool = False) -> None:
        """Make the index agree with the mode: on opening, and after bulk work.

        ``check_sessions`` (after a bulk import or re-embed) also builds it in ``auto`` mode when
        the largest session is above the limit. Builds here block until done.
        """
        await self.cancel_build()
        if self.mode == "never":
            await store.drop_vector_indexes()
            self.ready = False
            return
        indexes = await store.vector_indexes()
        exists = indexes.get(vector_index_name(self.dim), False)
        needed = (
            self.mode == "always"
            or exists
            or (check_sessions and await store.largest_session_rows() > self.exact_max_rows)
        )
        if needed:
            started = time.perf_counter()
            await store.ensure_vector_index(self.dim)  # also drops other dimensions' indexes
            if not exists:
                log.info("vector index built in %.1f s", time.perf_counter() - started)
        elif indexes:
            await store.drop_vector_indexes()  # another dimension's, or a broken one
        self.ready = needed

    async def suspend(self, store: PgDialogueStore) -> None:
        """Drop the index for bulk work; :meth:`settle` afterwards puts it back if wanted."""
        await self.cancel_build()
        await store.drop_vector_indexes()
        self.ready = False

    def request(self, store: PgDialogueStore) -> None:
        """A recall met a session above the limit: build the index in the background."""
        if self.mode == "never" or self.ready or self.building:
            return
        if time.monotonic() < self._retry_at:
            return
        log.info(
            "a session holds more than %d turns: building the vector index in the background "
            "(recall stays exact meanwhile)",
            self.exact_max_rows,
        )
        self._build = asyncio.create_task(self._build_concurrently(store))

    @property
    def state(self) -> str:
        """``ready``, ``building``, ``none`` (no session needs it yet) or ``off`` (never)."""
        if self.mode == "never":
            return "off"
        return "ready" if self.ready else "building" if self.building else "none"

    @property
    def building(self) -> bool:
        return self._build is not None and not self._build.done()

    async def wait_built(self) -> None:
        """Wait for a background build started by :meth:`request`, if any."""
        if self._build is not None:
            await asyncio.shield(self._build)

    async def cancel_build(self) -> None:
        if self._build is not None and not self._build.done():
            self._build.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._build
        self._build = None

    async def _build_concurrently(self, store: PgDialogueStore) -> None:
        started = time.perf_counter()
        try:
            await store.ensure_vector_index(self.dim, concurrently=True)
        except (StorageError, asyncio.TimeoutError) as exc:
            self._retry_at = time.monotonic() + RETRY_AFTER_FAILURE
            log.warning(
                "building the vector index failed (retried in %.0f min): %s",
                RETRY_AFTER_FAILURE / 60,
                exc,
            )
            return
        self.ready = True
        log.info("vector index ready after %.1f s", time.perf_counter() - started)
