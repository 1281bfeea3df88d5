"""``TemporalMemory``: the core's facade over the parts ``open_memory`` wires (``wiring``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np

from .background import DailySchedule, DailyStep, RoundLoop
from .context.block import LineBudget, MemoryBlock, build_memory_block
from .dialogue.recall_store import PgRecallStore
from .dialogue.upkeep import KEYWORD_BACKFILL_BATCH, Progress
from .dialogue.upkeep_store import PgUpkeepStore
from .distill.keeper import MaintenanceReport
from .distill.stats import DistilledStats, distilled_stats
from .errors import DatabaseUnavailableError, EmbeddingError, StorageError
from .evaluation.worker import PURGED
from .lang.indexed import text_form_for
from .models import (
    AddOutcome,
    ForgetScope,
    Forgotten,
    MemoryTurn,
    RecalledMessage,
    RecallResult,
    Role,
    TurnInput,
    generate_session_key,
)
from .parts import MemoryParts
from .recall.options import DEFAULT_RECALL, RecallOptions
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
    """Store, embed and recall a QQ bot's turns, session by session.

    Built by :func:`open_memory`. While the database is unreachable or refuses writes, new
    turns go to a local spool and are written once it takes them again (``dialogue.spool`` says
    which failures those are); turns whose embedding failed are embedded later. An
    ``embedded_server`` that dies is started again by the maintenance loop.
    """

    def __init__(self, parts: MemoryParts) -> None:
        """``parts``: every collaborator, built by ``open_memory`` (``memory_core.wiring``)."""
        self.parts = parts
        self.settings = parts.settings
        self.tz = parts.settings.tz
        self.embedder = parts.embedder
        self.token_counter = parts.token_counter
        self.embedding_model = parts.embedder.model
        self.embedding_dim = parts.embedder.dim
        # The text form new rows are indexed in (lang.indexed); older rows follow in the
        # background when it changed.
        self.text_form = text_form_for(
            parts.settings.memory_index_speaker, parts.settings.memory_index_context
        )
        self.database_description = "not connected"
        self._spool = parts.spool
        self._embedded = parts.embedded_server
        self._dsn: str | None = None
        self._connect_refusal: str | None = None  # the last refusal said (``connect``)
        self.database = parts.database
        self.retention = parts.retention
        self.evaluations = parts.evaluations
        self.vector_index = parts.vector_index
        self._retriever = parts.retriever
        self.sharing = parts.sharing
        # Whose memory each QQ bot account reads and writes (memory_core.accounts).
        self.accounts = parts.accounts
        self._maintenance: RoundLoop | None = None
        self._backfill_needed = parts.backfill_due  # set: the maintenance has work
        # The dialogue's writing path and its upkeep (memory_core.dialogue).
        self.writer = parts.writer
        self.upkeep = parts.upkeep
        self._connect_lock = asyncio.Lock()
        self.daily = daily_schedule(self)

    generate_session_key = staticmethod(generate_session_key)

    # ----------------------------------------------------------------- lifecycle

    async def connect(self, *, allow_model_change: bool = False) -> None:
        """Locate, migrate and pool the database; check the embedding model of stored rows."""
        async with self._connect_lock:
            if self.database.connected:
                return
            location = await locate_database(self.settings.external_dsn(), self._embedded)
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
                await self.upkeep.check(
                    pool, location.description, allow_model_change=allow_model_change
                )
            except BaseException:
                await pool.close()
                raise
            self.database.attach(pool)
            self._dsn = location.dsn
            self.database_description = location.description
            self._backfill_needed.set()

    async def adopt_account(self, self_id: int) -> str:
        """A QQ bot account connected: the first one ever on this database adopts the memory
        stored before (``memory_core.accounts``). Returns ``self_id``'s namespace, the one to
        serve its events in (``accounts.serving``)."""
        await self.accounts.adopt(self.database.store(PgUpkeepStore), self_id)
        return await self.accounts.decide(self.database.store(PgUpkeepStore), self_id)

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
            self._backfill_needed.loop = self._maintenance
            self._maintenance.start()

    async def _maintenance_round(self) -> None:
        try:
            await self._upkeep()
        finally:
            # Backfills still due (not reached, failed, or more to do than one round's share):
            # the next round comes at once (after the rest that a failure takes).
            if self._backfill_needed.is_set() and self._maintenance is not None:
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
        await self.flush_spool()
        await self.daily.run_due()
        if not self._backfill_needed.is_set():
            return
        self._backfill_needed.clear()
        try:
            await self.upkeep.run_round()
        except BaseException:
            # Not done: tried again next round, even if no new turn asks for it.
            self._backfill_needed.set()
            raise

    async def _restart_dead_server(self) -> float | None:
        """Start the embedded server again if it died (an external DSN is never started by
        us); return how long to wait before the next attempt if it failed."""
        if self._embedded is None:
            return None
        retry_in = await asyncio.to_thread(self._embedded.restart_if_dead)
        if retry_in is None and self._dsn is not None and self._embedded.dsn != self._dsn:
            await self._drop_pool()  # it moved; connect() pools the new address
        return retry_in

    async def _drop_pool(self) -> None:
        async with self._connect_lock:
            pool, self._dsn = self.database.detach(), None
            if pool is not None:
                pool.terminate()

    async def stop_embedded_server(self) -> None:
        """Stop the embedded PostgreSQL server, if this memory runs one."""
        if self._embedded is not None:
            await asyncio.to_thread(self._embedded.stop)

    async def aclose(self) -> None:
        await self.writer.aclose()
        await self.parts.extraction.aclose()
        await self.evaluations.aclose()
        if self._maintenance is not None:
            await self._maintenance.stop()
            self._maintenance = None
            self._backfill_needed.loop = None
        await self.vector_index.cancel_builds()
        pool = self.database.detach()
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
        await self.embedder.aclose()
        if self.parts.reranker is not None:
            await self.parts.reranker.aclose()

    @property
    def connected(self) -> bool:
        return self.database.connected

    @property
    def reindex_due(self) -> bool:
        """Whether stored rows may still be indexed in another text form than the configured
        one (until a walk of ``reindex_text_form`` finds none)."""
        return self.upkeep.reindex_due

    @property
    def write_trouble(self) -> str | None:
        """Why turns went to the spool instead of the database, until a flush has written them;
        ``None`` when writes work."""
        return self.writer.write_trouble

    # ----------------------------------------------------------------- writing

    def check_turn(self, turn: TurnInput) -> None:
        """Raise ``InvalidTurnError`` if ``turn`` could not be stored; store nothing."""
        self.writer.check_turn(turn)

    async def add_turn(self, turn: TurnInput, *, embed_later: bool = False) -> AddOutcome:
        """Store one turn, its text scrubbed first (``lang.text.scrub``), embedded now or,
        with ``embed_later``, batched within ``EMBEDDING_DEFER_WINDOW`` (a slow or failing
        embedder leaves it to the backfill). Spooled when the database refuses it
        (``AddOutcome.spooled``), ``StorageError`` only if the spool fails too;
        ``InvalidTurnError`` for input that cannot be stored."""
        return await self.writer.add_turn(turn, embed_later=embed_later)

    async def add_dialogue(
        self,
        user_id: int,
        role: Role,
        content: str,
        group_id: int | None = None,
        sender_name: str | None = None,
        message_id: int | None = None,
        **extra: Any,
    ) -> AddOutcome:
        """Seed-style wrapper of :meth:`add_turn` (extra: self_id, created_at, raw_segments)."""
        return await self.writer.add_dialogue(
            user_id, role, content, group_id, sender_name, message_id, **extra
        )

    async def add_dialogues(
        self,
        turns: Sequence[TurnInput],
        *,
        embeddings: np.ndarray | None = None,
        batch_size: int = 1000,
        progress: Progress | None = None,
    ) -> int:
        """Bulk insert (COPY), embedding in batches unless ``embeddings`` are given.

        Returns how many rows were new. Invalid turns raise before anything is written.
        For large imports, wrap calls in :meth:`vector_index_deferred`. Given ``embeddings``
        must be of the texts ``writer.rows_for(turns)`` gives as ``indexed`` (with
        ``MEMORY_INDEX_CONTEXT`` they hold the line each turn answers).
        """
        return await self.writer.add_dialogues(
            turns, embeddings=embeddings, batch_size=batch_size, progress=progress
        )

    @contextlib.asynccontextmanager
    async def vector_index_deferred(self) -> AsyncIterator[None]:
        """Drop the sessions' HNSW indexes for a bulk import (a live index costs up to ~10 ms a
        row) and build them afterwards, even on error; recall searches exactly meanwhile
        (``memory_core.dialogue.vector_index``)."""
        async with self.upkeep.vector_index_deferred():
            yield

    async def index_large_sessions(self) -> None:
        """Build now the HNSW index of every session above MEMORY_EXACT_SEARCH_MAX_ROWS that
        lacks one (recall would start it in the background; a scan of the session index)."""
        await self.upkeep.index_large_sessions()

    async def flush_spool(self) -> int:
        """Write spooled turns to the database, then forget the messages recalled meanwhile;
        returns how many turns were new.

        Each item on its own terms (``memory_core.dialogue.spool``): a bad one goes to the
        dead-letter file, the others are written. When the database is lost or refuses writes,
        what was done is kept and the failure (``StorageError``) is raised; the rest waits.
        """
        forgetting = self.parts.forgetting
        return await self.writer.flush_spool(forgetting.spooled_recall, forgetting.spooled_scope)

    async def settle_embeddings(self, timeout: float | None = None) -> None:
        """Wait until the turns stored with ``embed_later`` so far have their vectors (or were
        left to the backfill because the embedder or the database failed), at most
        ``timeout`` seconds: a search someone asked for by name (``/recall``) should find by
        meaning what was just said."""
        await self.writer.settle_embeddings(timeout)

    async def backfill_embeddings(self, batch_size: int | None = None) -> int:
        """Embed turns stored without an embedding; returns how many were embedded (turns
        whose deferred embedding is still to come are left to it)."""
        return await self.upkeep.backfill_embeddings(batch_size)

    async def backfill_keywords(self, batch_size: int = KEYWORD_BACKFILL_BATCH) -> int:
        """Make the keywords of rows stored without them (before migration 003, or after a
        change of the analyser); returns how many rows were filled."""
        return await self.upkeep.backfill_keywords(batch_size)

    async def reindex_text_form(
        self, *, batch_size: int | None = None, max_seconds: float | None = None
    ) -> int:
        """Re-embed and re-keyword the rows indexed in another text form than the configured
        one (``MEMORY_INDEX_SPEAKER``), a batch at a time; see
        ``dialogue.upkeep.DialogueUpkeep.reindex_text_form``."""
        return await self.upkeep.reindex_text_form(batch_size=batch_size, max_seconds=max_seconds)

    # ----------------------------------------------------------------- reading

    async def recall(
        self,
        user_id: int,
        query: str,
        group_id: int | None = None,
        options: RecallOptions = DEFAULT_RECALL,
    ) -> RecallResult:
        """Top-N anchors of this session (of the whole group when it is shared, see
        ``recall.sharing``), each widened by ±window turns; see
        :meth:`memory_core.recall.retriever.Retriever.recall` for the channels and the filters,
        and ``recall.options.RecallOptions`` for the knobs."""
        return await self._retriever.recall(user_id, query, group_id, options)

    async def get_contextual_memory(
        self,
        user_id: int,
        query: str,
        group_id: int | None = None,
        top_n: int = 3,
        window_size: int = 2,
        now: datetime | None = None,
    ) -> list[MemoryTurn]:
        """Seed API: the anchors and their windows, deduplicated, in time order."""
        options = RecallOptions(top_n=top_n, window_size=window_size, now=now)
        return list((await self.recall(user_id, query, group_id, options)).turns)

    def format_block(
        self,
        result: RecallResult,
        now: datetime | None = None,
        max_tokens: int | None = None,
        asker: int | None = None,
    ) -> MemoryBlock:
        """The time-stamped memory block of ``result`` within the token budget (MEMORY_MAX_TOKENS
        unless ``max_tokens``); ``asker`` labels a shared group's other members."""
        tokens = self.settings.memory_max_tokens if max_tokens is None else max_tokens
        now = now or datetime.now(timezone.utc)
        budget = LineBudget(now, self.tz, self.token_counter, tokens, asker=asker)
        return build_memory_block(result.windows, budget)

    async def recent_turns(
        self,
        user_id: int,
        group_id: int | None,
        *,
        limit: int,
        since: datetime,
        now: datetime | None = None,
    ) -> list[MemoryTurn]:
        """The session's latest turns since ``since`` (at most ``limit``), in time order — the
        short-term context, so expired ("not kept") turns of that window are included."""
        return await self.database.store(PgRecallStore).recent_turns(
            generate_session_key(user_id, group_id),
            since=since,
            now=now or datetime.now(timezone.utc),
            limit=limit,
        )

    # ----------------------------------------------------------------- deleting

    async def delete_message(self, message: RecalledMessage) -> Forgotten | None:
        """Forget a recalled (撤回) QQ message everywhere; ``None`` when it waits in the
        spool for the database (``forgetting.Forgetting.delete_message``)."""
        return await self.parts.forgetting.delete_message(message)

    async def forget(self, scope: ForgetScope) -> Forgotten:
        """Delete the memories of ``scope`` (turns, also spooled ones, distilled memories,
        cached answers); see ``forgetting.Forgetting.forget``."""
        return await self.parts.forgetting.forget(scope)

    async def count_forget(self, scope: ForgetScope) -> Forgotten:
        """What ``forget`` of ``scope`` would delete from the database now, by kind."""
        return await self.parts.forgetting.count_forget(scope)

    # ----------------------------------------------------------------- admin

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

    async def preload_answer_cache(self, now: datetime | None = None) -> int:
        """(Re)load the public entries of ``answer_cache_preload.jsonl`` (``MEMORY_CONFIG_DIR``);
        0 when the cache is off."""
        path = self.settings.config_file("answer_cache_preload.jsonl")
        return await self.parts.answer_cache.preload(path, now)

    async def evaluate_pending(self, now: datetime | None = None) -> int:
        """Score every queued exchange that is due now; returns how many were settled."""
        return await self.evaluations.run_once(now)

    async def count_daily(self, metrics: dict[str, int], now: datetime | None = None) -> None:
        """Add to today's counters (``memory_daily_stats``, the console's charts)."""
        now = now or datetime.now(timezone.utc)
        await self.database.store(PgCounterStore).bump(now.astimezone(self.tz).date(), metrics)

    async def purge_expired(self, now: datetime | None = None) -> int:
        """Delete expired rows in short batches (``DialogueUpkeep.purge_expired``: a row goes
        once it has been expired for ``CHAT_RECENT_MINUTES``) and what the recycle bin holds
        past its time; returns how many rows, and counts them per day."""
        now, total = await self.upkeep.purge_expired(now)
        await self.database.store(PgCounterStore).bump(
            now.astimezone(self.tz).date(), {PURGED: total}
        )
        binned = await self.database.store(PgRecycleBinStore).purge_bin(now)
        log.info("purged %d expired memory row(s), %d from the recycle bin", total, binned)
        return total

    async def reembed(self, *, batch_size: int = 256, progress: Progress | None = None) -> int:
        """Re-embed (and re-keyword) every row not embedded by the configured model or not in
        the configured text form, switch the vector index, then the distilled memories."""
        done = await self.upkeep.reembed(batch_size=batch_size, progress=progress)
        done += await self.parts.keeper.reembed(batch_size=batch_size)
        return done + await self.parts.answer_cache.reembed(batch_size=batch_size)


# The distilled upkeep comes this long after the purge, so that it does not merge or re-rank
# what is about to be deleted.
UPKEEP_AFTER_PURGE = timedelta(minutes=15)


def daily_schedule(memory: TemporalMemory) -> DailySchedule:
    """The memory's daily steps, run by its maintenance round: the purge of expired rows at
    ``MEMORY_PURGE_TIME`` (and at the first round after start), the distilled upkeep
    ``UPKEEP_AFTER_PURGE`` later."""
    hour, _, minute = memory.settings.memory_purge_time.partition(":")
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
        memory.settings.tz,
    )
