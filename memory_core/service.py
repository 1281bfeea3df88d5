"""``TemporalMemory``: the core's facade, and ``open_memory``, its one composition root."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Sequence
from datetime import date, datetime, timedelta, timezone
from typing import Any

import numpy as np

from .accounts import AccountBook, PgAccountStore, serving
from .console.store import PgConsoleStore
from .context.block import LineBudget, MemoryBlock, build_memory_block
from .context.builder import ContextBuilder, MemoryContext
from .dialogue.admin_store import PgAdminStore
from .dialogue.forget_store import PgForgetStore
from .dialogue.recall_store import PgRecallStore, SessionTail
from .dialogue.spool import TurnSpool, failure_text, is_bad_item
from .dialogue.upkeep import KEYWORD_BACKFILL_BATCH, DialogueUpkeep, Progress
from .dialogue.vector_index import VectorIndex
from .dialogue.writing import TurnWriter
from .distill.service import DistilledService
from .errors import (
    DatabaseUnavailableError,
    EmbeddingError,
    MemoryCoreError,
    StorageError,
)
from .evaluation.evaluator import Evaluator, build_evaluator
from .evaluation.retention import RetentionPolicy, load_retention_policy
from .evaluation.store import PgEvaluationStore
from .evaluation.worker import PURGED, EvaluationOff, EvaluationWorker
from .lang.indexed import CONTENT_ONLY, WITH_SPEAKER
from .lang.tokens import TokenCounter, load_token_counter
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
from .providers.embedding import Embedder, build_embedder
from .providers.llm import CHAT_CACHED_TOKENS, CHAT_PROMPT_TOKENS
from .providers.rerank import ApiReranker, build_reranker
from .recall.options import DEFAULT_RECALL, RecallOptions
from .recall.retriever import Retriever
from .recall.sharing import GroupSharing
from .settings import MemorySettings
from .stats import EvaluationFigures, MemoryStats
from .storage.counters import PgCounterStore
from .storage.database import (
    CONNECTION_ERRORS,
    create_pool,
    locate_database,
    prepare_database,
)
from .storage.database_handle import Database
from .storage.embedded_server import EmbeddedServer, embedded_cluster_dir

log = logging.getLogger(__name__)


class TemporalMemory:
    """Store, embed and recall a QQ bot's turns, session by session.

    Built by :func:`open_memory`. While the database is unreachable or refuses writes, new
    turns go to a local spool and are written once it takes them again (``dialogue.spool`` says
    which failures those are); turns whose embedding failed are embedded later. An
    ``embedded_server`` that dies is started again by the maintenance loop.
    """

    def __init__(
        self,
        *,
        settings: MemorySettings,
        embedder: Embedder,
        token_counter: TokenCounter,
        spool: TurnSpool,
        evaluator: Evaluator | None = None,
        retention: RetentionPolicy | None = None,
        embedded_server: EmbeddedServer | None = None,
        reranker: ApiReranker | None = None,
    ) -> None:
        self.settings = settings
        self.tz = settings.tz
        self.embedder = embedder
        self.token_counter = token_counter
        self.embedding_model = embedder.model
        self.embedding_dim = embedder.dim
        # The text form new rows are indexed in (lang.indexed); older rows follow in the
        # background when it changed.
        self.text_form = WITH_SPEAKER if settings.memory_index_speaker else CONTENT_ONLY
        self.database_description = "not connected"
        self._spool = spool
        self._embedded = embedded_server
        self._dsn: str | None = None
        self.database = Database()
        self.retention = retention
        self.evaluations: EvaluationWorker | EvaluationOff = (
            EvaluationWorker(
                database=self.database,
                evaluator=evaluator,
                policy=retention,
                tz=self.tz,
                concurrency=settings.evaluator_concurrency,
                batch_size=settings.evaluator_batch_size,
            )
            if evaluator is not None and retention is not None
            else EvaluationOff()
        )
        self.vector_index = VectorIndex(
            mode=settings.memory_vector_index,
            dim=embedder.dim,
            exact_max_rows=settings.memory_exact_search_max_rows,
        )
        self._retriever = Retriever(
            settings=settings,
            database=self.database,
            embedder=embedder,
            vector_index=self.vector_index,
            reranker=reranker,
        )
        self.sharing = GroupSharing(listed=settings.memory_shared_groups, database=self.database)
        # Whose memory each QQ bot account reads and writes (memory_core.accounts).
        self.accounts = AccountBook(shared=settings.memory_share_accounts)
        # Distilled memory, its background extraction and the answer cache.
        self.distilled = DistilledService(
            settings=settings, embedder=embedder, tz=self.tz, database=self.database
        )
        self._context_builder = ContextBuilder(
            settings=settings,
            keeper=self.distilled.keeper,
            counter=token_counter,
            tz=self.tz,
        )
        self._maintenance: asyncio.Task[None] | None = None
        self._backfill_needed = asyncio.Event()
        # The dialogue's writing path and its upkeep (memory_core.dialogue).
        self.writer = TurnWriter(
            settings=settings,
            database=self.database,
            embedder=embedder,
            token_counter=token_counter,
            spool=spool,
            text_form=self.text_form,
            on_more_work=self._backfill_needed.set,
        )
        self.upkeep = DialogueUpkeep(
            settings=settings,
            database=self.database,
            embedder=embedder,
            vector_index=self.vector_index,
            deferred=self.writer.deferred,
            text_form=self.text_form,
            on_more_work=self._backfill_needed.set,
        )
        self._connect_lock = asyncio.Lock()

    generate_session_key = staticmethod(generate_session_key)

    # ----------------------------------------------------------------- lifecycle

    async def connect(self, *, allow_model_change: bool = False) -> None:
        """Locate, migrate and pool the database; check the embedding model of stored rows."""
        async with self._connect_lock:
            if self.database.connected:
                return
            location = await locate_database(_configured_dsn(self.settings), self._embedded)
            await prepare_database(location.dsn)
            pool = await create_pool(location.dsn, self.settings.memory_pool_size)
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
        await self.accounts.adopt(self.database.store(PgAccountStore), self_id)
        return self.accounts.namespace(self_id)

    def start_maintenance(self, interval: float = 30.0) -> None:
        """Run the background loop: reconnect, flush the spool, backfill embeddings."""
        if self._maintenance is None:
            self._maintenance = asyncio.create_task(self._maintenance_loop(interval))

    async def _maintenance_loop(self, interval: float) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._backfill_needed.wait(), timeout=interval)
            try:
                retry_in = await self._restart_dead_server()
                if retry_in is not None:
                    await asyncio.sleep(retry_in)
                    continue
                await self.connect()
                await self.flush_spool()
                if self._backfill_needed.is_set():
                    self._backfill_needed.clear()
                    try:
                        await self.upkeep.run_round()
                    except BaseException:
                        # Not done: tried again next round, even if no new turn asks for it.
                        self._backfill_needed.set()
                        raise
            except (DatabaseUnavailableError, EmbeddingError) as exc:
                log.warning("memory maintenance postponed: %s", exc)
                await asyncio.sleep(interval)
            except StorageError as exc:  # writes refused: said once, by TurnWriter.writes_failing
                log.debug("memory maintenance postponed: %s", exc)
                await asyncio.sleep(interval)
            except Exception:  # keep the loop alive; the next round retries
                log.exception("memory maintenance failed")
                await asyncio.sleep(interval)

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

    async def _stop_embedded_server(self) -> None:
        if self._embedded is not None:
            await asyncio.to_thread(self._embedded.stop)

    async def aclose(self) -> None:
        await self.writer.aclose()
        await self.distilled.aclose()
        await self.evaluations.aclose()
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintenance
            self._maintenance = None
        await self.vector_index.cancel_builds()
        pool = self.database.detach()
        if pool is not None:
            try:
                await pool.close()
            except CONNECTION_ERRORS as exc:  # the server went first; nothing left to close
                log.warning("database connections closed abruptly: %s", exc)
                pool.terminate()
        await self._stop_embedded_server()
        await self.close_providers()

    async def close_providers(self) -> None:
        """Close the embedder's and the reranker's HTTP clients (or local model)."""
        await self.embedder.aclose()
        if self._retriever.reranker is not None:
            await self._retriever.reranker.aclose()

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
        """Store one turn (embedded now, or later if the embedder fails or is slower than
        ``EMBEDDING_STORE_DEADLINE``). With ``embed_later`` it is stored at once without its
        vector, which follows within ``EMBEDDING_DEFER_WINDOW`` seconds, batched with other
        turns' (``dialogue.deferred_embeddings``): what a conversation does, whose reply needs
        only the query's embedding.

        Its text is scrubbed first (``lang.text.scrub``: no NUL, no lone surrogate), so what is
        stored, spooled and embedded is the same. Raises ``InvalidTurnError`` for input that
        cannot be stored. When the database is unreachable or refuses writes the turn is
        spooled locally and ``AddOutcome.spooled`` is true; ``StorageError`` only if the spool
        cannot be written either.
        """
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
        For large imports, wrap calls in :meth:`vector_index_deferred`.
        """
        return await self.writer.add_dialogues(
            turns, embeddings=embeddings, batch_size=batch_size, progress=progress
        )

    @contextlib.asynccontextmanager
    async def vector_index_deferred(self) -> AsyncIterator[None]:
        """Drop the sessions' HNSW indexes for a bulk import; afterwards (even on error) build
        the index of every session above MEMORY_EXACT_SEARCH_MAX_ROWS.

        Inserting into a live HNSW index costs up to ~10 ms a row; one build at the end is far
        faster. Recall stays correct meanwhile: sessions without an index are searched exactly.
        See ``memory_core.dialogue.vector_index``.
        """
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
        return await self.writer.flush_spool(self._forget_spooled, self._forget_spooled_scope)

    async def _forget_spooled(self, recalled: RecalledMessage) -> int:
        return (await self._forget_recalled(recalled)).dialogues

    async def _forget_spooled_scope(self, scope: ForgetScope) -> int:
        forgotten = await self._forget_stored(scope)
        log.info("a /forget made while the database was unreachable is done: %s", forgotten)
        return forgotten.dialogues

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
        return await self._retriever.recall(
            user_id,
            query,
            group_id,
            options,
            shared=await self.sharing.shared(group_id),
        )

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
        exclude_ids: Sequence[int] = (),
        max_tokens: int | None = None,
        asker: int | None = None,
    ) -> MemoryBlock:
        """The time-stamped memory block for a prompt, within the token budget; ``asker``
        labels a shared group's other members (``build_memory_block``)."""
        budget = LineBudget(
            now or datetime.now(timezone.utc),
            self.tz,
            self.token_counter,
            self.settings.memory_max_tokens if max_tokens is None else max_tokens,
            exclude_ids,
            asker,
        )
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

    async def last_turn_time(
        self, user_id: int, group_id: int | None, now: datetime | None = None
    ) -> datetime | None:
        return await self.database.store(PgRecallStore).last_turn_time(
            generate_session_key(user_id, group_id), now or datetime.now(timezone.utc)
        )

    async def session_tail(
        self,
        user_id: int,
        group_id: int | None,
        *,
        limit: int,
        since: datetime,
        now: datetime,
        group_wide: bool = False,
    ) -> SessionTail:
        """``last_turn_time`` and ``recent_turns`` (both up to ``now``) in one round trip;
        ``group_wide``: the recent turns of the whole group (every member's), not the session's."""
        return await self.database.store(PgRecallStore).session_tail(
            generate_session_key(user_id, group_id),
            since=since,
            now=now,
            limit=limit,
            group_id=group_id if group_wide else None,
        )

    # ----------------------------------------------------------------- deleting

    async def delete_message(self, message: RecalledMessage) -> Forgotten | None:
        """Forget a recalled (撤回) QQ message: its turn, the bot's reply to it and its later
        replies repeating it (``lang.repeats``), the distilled memories drawn from any of them
        and the sender's answers cached since. Returns what went,
        or ``None`` when the database is unreachable or refuses writes: the recall is then
        spooled and done once it takes them again."""
        try:
            return await self._forget_recalled(message)
        except StorageError as exc:
            if is_bad_item(exc):
                raise
            await self.writer.keep_recall(message, exc)
            return None

    async def _forget_recalled(self, message: RecalledMessage) -> Forgotten:
        turns = await self.database.store(PgForgetStore).delete_recalled(message)
        # The cached answers go in the recalling account's memory, also when a spooled recall
        # is done later, outside the event that brought it.
        with serving(self.accounts.namespace(message.self_id)):
            distilled = await self.distilled.forget_turns(turns)
        replies = sum(1 for t in turns if t.role == "assistant")
        return dataclasses.replace(distilled, dialogues=len(turns), bot_replies=replies)

    async def forget(
        self,
        *,
        user_id: int | None = None,
        group_id: int | None = None,
        private_only: bool = False,
        everything: bool = False,
    ) -> Forgotten:
        """Delete memories: a group session (user+group), a user's private chat
        (user+private_only), all of a user's rows (user), a whole group (group) or everything.

        The scope's turns — stored, and still waiting in the spool — distilled memories and
        cached answers all go; returns how many of each. When the database cannot be reached
        or refuses writes, the spooled turns go now and the request waits in the spool for the
        rest (``Forgotten.deferred``)."""
        scope = ForgetScope(user_id, group_id, private_only, everything)
        # The spool first: a flush between the two steps could write its turns back.
        spooled = await self.writer.forget_spooled(scope)
        try:
            forgotten = await self._forget_stored(scope)
        except StorageError as exc:
            if is_bad_item(exc):
                raise
            await self.writer.keep_forget(scope, exc)
            log.warning("forget deferred until the database is back: %s", failure_text(exc))
            return Forgotten(dialogues=spooled, deferred=True)
        forgotten = dataclasses.replace(forgotten, dialogues=forgotten.dialogues + spooled)
        log.info(
            "forgot %d turn(s), %d fact(s), %d preference(s), %d summar(ies), %d cached answer(s)",
            forgotten.dialogues,
            forgotten.facts,
            forgotten.preferences,
            forgotten.summaries,
            forgotten.cached_answers,
        )
        return forgotten

    async def count_forget(
        self,
        *,
        user_id: int | None = None,
        group_id: int | None = None,
        private_only: bool = False,
        everything: bool = False,
    ) -> Forgotten:
        """What ``forget`` with the same scope would delete from the database now, by kind: the
        figures a /forget question names before it asks. Turns still in the spool are not
        counted (``forget`` takes them too). ``StorageError`` when the database cannot say."""
        scope = ForgetScope(user_id, group_id, private_only, everything)
        dialogues = await self.database.store(PgForgetStore).count_scope(
            **dataclasses.asdict(scope)
        )
        distilled = await self.distilled.count_scope(scope)
        return dataclasses.replace(distilled, dialogues=dialogues)

    async def _forget_stored(self, scope: ForgetScope) -> Forgotten:
        options = dataclasses.asdict(scope)
        deleted = await self.database.store(PgForgetStore).delete_scope(**options)
        distilled = await self.distilled.forget(scope)
        # What the console deleted of that scope goes too: the recycle bin keeps copies.
        await self.database.store(PgConsoleStore).delete_scope(**options)
        return dataclasses.replace(distilled, dialogues=deleted)

    # ----------------------------------------------------------------- admin

    async def stats(self, now: datetime | None = None) -> MemoryStats:
        store_stats = await self.database.store(PgAdminStore).stats()
        cache_stats = getattr(self.embedder, "stats", None)
        evaluation_store = self.database.store(PgEvaluationStore)
        today = (now or datetime.now(timezone.utc)).astimezone(self.tz).date()
        today_totals = await evaluation_store.metric_totals(today)
        return MemoryStats(
            evaluation=EvaluationFigures(
                evaluator=self.evaluations.evaluator_name,
                totals=await evaluation_store.metric_totals(date.min),
                pending=await evaluation_store.pending_count(),
                band_names=self.retention.band_names if self.retention else (),
                purged_by_day=await evaluation_store.metric_by_day(
                    PURGED, today - timedelta(days=6)
                ),
            ),
            store=store_stats,
            embedding_model=self.embedding_model,
            embedding_dim=self.embedding_dim,
            database=self.database_description,
            spooled_turns=self._spool.pending(),
            dead_letters=self._spool.dead_letters(),
            dead_letter_file=str(self._spool.dead_path),
            write_trouble=self.writer.write_trouble,
            prompt_tokens_today=today_totals.get(CHAT_PROMPT_TOKENS, 0),
            cached_tokens_today=today_totals.get(CHAT_CACHED_TOKENS, 0),
            embedding_cache=cache_stats() if callable(cache_stats) else {},
            vector_index=self.settings.memory_vector_index,
            indexed_sessions=len(self.vector_index.indexed),
            indexing_sessions=self.vector_index.building,
            exact_search_max_rows=self.settings.memory_exact_search_max_rows,
        )

    async def enqueue_evaluation(self, user_turn_id: int, assistant_turn_id: int) -> None:
        """Queue a finished exchange for scoring (no-op when evaluation is off).

        Returns at once; the exchange is kept without expiry until it is scored.
        """
        await self.evaluations.enqueue(user_turn_id, assistant_turn_id)

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
        binned = await self.database.store(PgConsoleStore).purge_bin(now)
        log.info("purged %d expired memory row(s), %d from the recycle bin", total, binned)
        return total

    async def reembed(self, *, batch_size: int = 256, progress: Progress | None = None) -> int:
        """Re-embed (and re-keyword) every row not embedded by the configured model or not in
        the configured text form, switch the vector index, then the distilled memories."""
        done = await self.upkeep.reembed(batch_size=batch_size, progress=progress)
        return done + await self.distilled.reembed(batch_size)

    # ------------------------------------------------------------------ prompt context

    async def build_context(
        self,
        user_id: int,
        group_id: int | None,
        query: str,
        now: datetime | None = None,
        exclude_ids: Sequence[int] = (),
        *,
        recall: RecallResult | None = None,
        max_tokens: int | None = None,
        touch: bool = True,
        settled: bool = False,
    ) -> MemoryContext:
        """The memory text for a reply within MEMORY_MAX_TOKENS: preferences, relevant facts,
        recent summaries, then recalled dialogue (minus ``exclude_ids``, the short-term turns
        already in the messages). Pass ``recall`` to reuse a recall already made;
        ``touch=False`` does not count the memories as used; ``settled``: preferences and
        summaries apart (``MemoryContext.settled``)."""
        now = now or datetime.now(timezone.utc)
        return await self._context_builder.build(
            user_id,
            group_id,
            query,
            now=now,
            exclude_ids=exclude_ids,
            recall=(
                recall
                if recall is not None
                else self.recall(user_id, query, group_id, RecallOptions(now=now))
            ),
            max_tokens=max_tokens,
            touch=touch,
            settled=settled,
        )


def _configured_dsn(settings: MemorySettings) -> str | None:
    return settings.memory_dsn.get_secret_value() if settings.memory_dsn else None


async def open_memory(
    settings: MemorySettings,
    *,
    embedder: Embedder | None = None,
    evaluator: Evaluator | None = None,
    reranker: ApiReranker | None = None,
    require_database: bool = True,
    allow_model_change: bool = False,
    maintenance_interval: float | None = 30.0,
) -> TemporalMemory:
    """Build the memory from settings: embedder, tokenizer, spool, database.

    With ``require_database=False`` an unreachable database is not fatal: turns are spooled
    and the maintenance loop keeps trying to connect. ``maintenance_interval=None`` disables
    the background loop (tests and the CLI drive maintenance by hand).
    """
    # Built first: a bad RERANK_BASE_URL fails before anything holds a resource.
    chosen_reranker = reranker if reranker is not None else build_reranker(settings)
    chosen_embedder = embedder or await build_embedder(settings)
    counter = await asyncio.to_thread(load_token_counter, settings.memory_token_encoding)
    spool = TurnSpool(settings.memory_data_dir / "spool.jsonl")
    retention = load_retention_policy(
        settings.config_file(settings.memory_retention_file, "retention.toml")
    )
    chosen_evaluator = evaluator if evaluator is not None else build_evaluator(settings)
    embedded = (
        None
        if _configured_dsn(settings)
        else EmbeddedServer(embedded_cluster_dir(settings.memory_data_dir))
    )
    memory = TemporalMemory(
        settings=settings,
        embedder=chosen_embedder,
        token_counter=counter,
        spool=spool,
        evaluator=chosen_evaluator,
        retention=retention,
        embedded_server=embedded,
        reranker=chosen_reranker,
    )
    try:
        await memory.connect(allow_model_change=allow_model_change)
    except DatabaseUnavailableError as exc:
        if require_database:
            await memory._stop_embedded_server()
            await memory.close_providers()
            raise
        log.error("memory database unreachable at start-up, will keep retrying: %s", exc)
    except BaseException:
        await memory._stop_embedded_server()
        await memory.close_providers()
        raise
    if memory.connected:
        try:
            await memory.distilled.preload_answer_cache()
        except MemoryCoreError as exc:  # a bad preload file must not stop the bot
            log.error("answer cache preload failed: %s", exc)
    if maintenance_interval is not None:
        memory.start_maintenance(maintenance_interval)
        memory.evaluations.start()
        memory.distilled.start()
    return memory
