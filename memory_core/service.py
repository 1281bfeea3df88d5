"""``TemporalMemory``: the core's facade over the parts ``open_memory`` wires (``wiring``)."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

from .background import DailySchedule, DailyStep, RoundLoop
from .dialogue.upkeep import Progress
from .distill.keeper import MaintenanceReport
from .distill.stats import DistilledStats, distilled_stats
from .errors import DatabaseUnavailableError, EmbeddingError, StorageError
from .evaluation.worker import PURGED
from .parts import MemoryParts
from .stats import MemoryStats, memory_stats
from .storage.counters import PgCounterStore
from .storage.database import (
    CONNECTION_ERRORS,
    create_pool,
    locate_database,
    prepare_database,
)
from .storage.recycle_bin import PgRecycleBinStore

log = logging.getLogger(__name__)


class TemporalMemory:
    """Runs the memory's lifecycle over the parts ``open_memory`` wires (``wiring``).

    It connects, runs the maintenance round (the embedded server restarted if it died, the
    database connected again, the spool flushed, the daily steps, the dialogue's backfills) and
    closes; and it does what combines several parts (purge, re-embed, the distilled upkeep,
    the statistics). Everything else is done by the part that owns it, reached as
    ``memory.parts.<part>`` (``parts.MemoryParts``): the writer stores turns, the retriever
    recalls, ``forgetting`` forgets, the upkeep backfills.

    While the database is unreachable or refuses writes, new turns go to a local spool and are
    written once it takes them again (``dialogue.spool`` says which failures those are); turns
    whose embedding failed are embedded later. An ``embedded_server`` that dies is started
    again by the maintenance loop.
    """

    def __init__(self, parts: MemoryParts) -> None:
        """``parts``: every collaborator, built by ``open_memory`` (``memory_core.wiring``)."""
        self.parts = parts
        self.database_description = "not connected"
        self._dsn: str | None = None
        self._connect_refusal: str | None = None  # the last refusal said (``connect``)
        self._maintenance: RoundLoop | None = None
        self._connect_lock = asyncio.Lock()
        self.daily = daily_schedule(self)

    # ----------------------------------------------------------------- lifecycle

    async def connect(self, *, allow_model_change: bool = False) -> None:
        """Locate, migrate and pool the database; check the embedding model of stored rows."""
        parts = self.parts
        async with self._connect_lock:
            if parts.database.connected:
                return
            location = await locate_database(parts.settings.external_dsn(), parts.embedded_server)
            try:
                await prepare_database(location.dsn)
                pool = await create_pool(location.dsn)
            except DatabaseUnavailableError:
                raise  # said by the maintenance loop, a line a round
            except StorageError as exc:
                # The server answers and refuses (a changed password, a dropped database): the
                # maintenance loop keeps such failures quiet, so it is said here, once per reason.
                if str(exc) != self._connect_refusal:
                    log.warning("cannot use the memory's database: %s", exc)
                    self._connect_refusal = str(exc)
                raise
            self._connect_refusal = None
            try:
                await parts.upkeep.check(
                    pool, location.description, allow_model_change=allow_model_change
                )
            except BaseException:
                await pool.close()
                raise
            parts.database.attach(pool)
            self._dsn = location.dsn
            self.database_description = location.description
            parts.backfill_due.set()

    async def maintenance_round(self) -> None:
        """One maintenance round now, as the loop runs it (burst mode: a front end without the
        loop, or a test, drives it)."""
        await self._upkeep()

    def start_maintenance(self, interval: float = 30.0) -> None:
        """Run the background maintenance (``_maintenance_round``) when woken and at least
        every ``interval`` seconds: reconnect, flush the spool, backfill."""
        if self._maintenance is None:
            self._maintenance = RoundLoop(
                self._maintenance_round,
                interval=interval,
                name="memory maintenance",
                postponed=(DatabaseUnavailableError, EmbeddingError),
                quiet=(StorageError,),  # writes refused: said once, by TurnWriter.writes_failing
                rest_after_failure=True,
            )
            self.parts.backfill_due.loop = self._maintenance
            self._maintenance.start()

    async def _maintenance_round(self) -> None:
        try:
            await self._upkeep()
        finally:
            # Backfills still due (not reached, failed, or more to do than one round's share):
            # the next round comes at once (after the rest that a failure takes).
            if self.parts.backfill_due.is_set() and self._maintenance is not None:
                self._maintenance.wake()

    async def _upkeep(self) -> None:
        """One round of upkeep: the embedded server restarted if it died, the database
        connected, the spool flushed, the daily steps due run (``daily_schedule``), then (when
        some are due) the dialogue's backfills (``DialogueUpkeep.run_round``)."""
        retry_in = await self._restart_dead_server()
        if retry_in is not None:
            await asyncio.sleep(retry_in)
            return
        await self.connect()
        await self.parts.forgetting.flush_spool()
        await self.daily.run_due()
        due = self.parts.backfill_due
        if not due.is_set():
            return
        due.clear()
        try:
            await self.parts.upkeep.run_round()
        except BaseException:
            # Not done: tried again next round, even if no new turn asks for it.
            due.set()
            raise

    async def _restart_dead_server(self) -> float | None:
        """Start the embedded server again if it died (an external DSN is never started by
        us); return how long to wait before the next attempt if it failed."""
        embedded = self.parts.embedded_server
        if embedded is None:
            return None
        retry_in = await asyncio.to_thread(embedded.restart_if_dead)
        if retry_in is None and self._dsn is not None and embedded.dsn != self._dsn:
            await self._drop_pool()  # it moved; connect() pools the new address
        return retry_in

    async def _drop_pool(self) -> None:
        async with self._connect_lock:
            pool, self._dsn = self.parts.database.detach(), None
            if pool is not None:
                pool.terminate()

    async def stop_embedded_server(self) -> None:
        """Stop the embedded PostgreSQL server, if this memory runs one."""
        if self.parts.embedded_server is not None:
            await asyncio.to_thread(self.parts.embedded_server.stop)

    async def aclose(self) -> None:
        parts = self.parts
        await parts.writer.aclose()
        await parts.extraction.aclose()
        await parts.evaluations.aclose()
        if self._maintenance is not None:
            await self._maintenance.stop()
            self._maintenance = None
            parts.backfill_due.loop = None
        await parts.vector_index.cancel_builds()
        pool = parts.database.detach()
        if pool is not None:
            try:
                await pool.close()
            except CONNECTION_ERRORS as exc:  # the server went first; nothing left to close
                log.warning("database connections closed abruptly: %s", exc)
                pool.terminate()
        await self.stop_embedded_server()
        await self.close_providers()

    async def close_providers(self) -> None:
        """Close the embedder's and the reranker's HTTP clients (or local model)."""
        await self.parts.embedder.aclose()
        if self.parts.reranker is not None:
            await self.parts.reranker.aclose()

    # ----------------------------------------------------------------- fan-outs

    async def stats(self, now: datetime | None = None) -> MemoryStats:
        """The figures of ``/memstat`` and ``python -m memory_core stats``."""
        return await memory_stats(self.parts, self.database_description, now)

    async def distilled_stats(self, now: datetime | None = None) -> DistilledStats:
        """Figures for /memstat (``lines_zh()``): distilled memories, extraction, answer cache."""
        parts = self.parts
        return await distilled_stats(parts.database, parts.extraction, parts.answer_cache, now)

    async def maintain_distilled(self, now: datetime | None = None) -> MaintenanceReport:
        """Daily upkeep: merge near-duplicate memories, refresh importance, embed what is
        missing, drop expired cached answers."""
        report = await self.parts.keeper.maintain()
        await self.parts.answer_cache.purge_expired(now)
        log.info(
            "distilled memory upkeep: %d merged, %d importance refreshed, %d embedded",
            report.merged,
            report.importance_refreshed,
            report.embedded,
        )
        return report

    async def purge_expired(self, now: datetime | None = None) -> int:
        """Delete expired rows in short batches (``DialogueUpkeep.purge_expired``: a row goes
        once it has been expired for ``CHAT_RECENT_MINUTES``) and what the recycle bin holds
        past its time; returns how many rows, and counts them per day."""
        database = self.parts.database
        now, total = await self.parts.upkeep.purge_expired(now)
        await database.store(PgCounterStore).bump(
            now.astimezone(self.parts.tz).date(), {PURGED: total}
        )
        binned = await database.store(PgRecycleBinStore).purge_bin(now)
        log.info("purged %d expired memory row(s), %d from the recycle bin", total, binned)
        return total

    async def reembed(self, *, batch_size: int = 256, progress: Progress | None = None) -> int:
        """Re-embed (and re-keyword) every row not embedded by the configured model or not in
        the configured text form, switch the vector index, then the distilled memories."""
        done = await self.parts.upkeep.reembed(batch_size=batch_size, progress=progress)
        done += await self.parts.keeper.reembed(batch_size=batch_size)
        return done + await self.parts.answer_cache.reembed(batch_size=batch_size)


# The distilled upkeep comes this long after the purge, so that it does not merge or re-rank
# what is about to be deleted.
UPKEEP_AFTER_PURGE = timedelta(minutes=15)


def daily_schedule(memory: TemporalMemory) -> DailySchedule:
    """The memory's daily steps, run by its maintenance round: the purge of expired rows at
    ``MEMORY_PURGE_TIME`` (and at the first round after start), the distilled upkeep
    ``UPKEEP_AFTER_PURGE`` later."""
    hour, _, minute = memory.parts.settings.memory_purge_time.partition(":")
    purge_at = datetime(2000, 1, 1, int(hour), int(minute))
    return DailySchedule(
        [
            DailyStep("memory purge", memory.purge_expired, purge_at.time(), on_start=True),
            DailyStep(
                "distilled memory upkeep",
                memory.maintain_distilled,
                (purge_at + UPKEEP_AFTER_PURGE).time(),
            ),
        ],
        memory.parts.tz,
    )
