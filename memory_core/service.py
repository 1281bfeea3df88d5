"""``TemporalMemory``: the core's facade, and ``open_memory``, its one composition root."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from typing import Any

import numpy as np

from .answer_cache import AnswerCache, cache_threshold
from .context import ContextBuilder, MemoryContext
from .database import DatabaseLocation, create_pool, locate_database, prepare_database
from .distilled import (
    DistilledHit,
    DistilledKind,
    DistilledMemory,
    ExtractedMemory,
    SaveOutcome,
    dedupe_threshold,
)
from .distilled_stats import DistilledStats
from .distilled_store import CachedAnswer, PgAnswerCacheStore, PgDistilledStore
from .embedding import Embedder, build_embedder
from .errors import (
    DatabaseUnavailableError,
    EmbeddingError,
    EmbeddingModelMismatchError,
    MemoryCoreError,
)
from .evaluation import Evaluator, build_evaluator
from .evaluation_worker import PURGED, EvaluationWorker
from .extraction import build_extractor, extraction_off_reason
from .extraction_worker import ExtractionReport, ExtractionWorker
from .keeper import MaintenanceReport, MemoryKeeper
from .keywords import ANALYZER_VERSION as KEYWORD_ANALYZER_VERSION
from .keywords import document_terms
from .models import MemoryTurn, RecallResult, Role, TurnInput, generate_session_key
from .prompt import MemoryBlock, build_memory_block
from .retention import RetentionPolicy, load_retention_policy
from .retrieval import Retriever
from .settings import MemorySettings, RetrievalMode
from .spool import RecalledMessage, TurnSpool
from .stats import EvaluationFigures, MemoryStats
from .store import (
    NewTurnRow,
    PgDialogueStore,
    PgEvaluationStore,
)
from .tokens import TokenCounter, load_token_counter
from .turn_rows import prepare_row
from .vector_index import VectorIndex

log = logging.getLogger(__name__)

KEYWORD_BACKFILL_BATCH = 1000
REEMBED_COMMAND = "python -m memory_core reembed"
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class AddOutcome:
    """What ``add_turn`` did: stored (``turn``), found a duplicate, or spooled it."""

    turn: MemoryTurn | None
    duplicate: bool = False
    spooled: bool = False


class TemporalMemory:
    """Store, embed and recall a QQ bot's turns, session by session.

    Built by :func:`open_memory`. While the database is unreachable, new turns go to a local
    spool and are written once it is back; turns whose embedding failed are embedded later.
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
    ) -> None:
        self.settings = settings
        self.tz = settings.tz
        self.embedder = embedder
        self.token_counter = token_counter
        self.embedding_model = embedder.model
        self.embedding_dim = embedder.dim
        self.database_description = "not connected"
        self._spool = spool
        self._store: PgDialogueStore | None = None
        self._evaluation_store: PgEvaluationStore | None = None
        self.retention = retention
        self.evaluations = (
            EvaluationWorker(
                store=self._require_evaluation_store,
                evaluator=evaluator,
                policy=retention,
                tz=self.tz,
                concurrency=settings.evaluator_concurrency,
                batch_size=settings.evaluator_batch_size,
            )
            if evaluator is not None and retention is not None
            else None
        )
        self._pool: Any = None
        self.vector_index = VectorIndex(
            mode=settings.memory_vector_index,
            dim=embedder.dim,
            exact_max_rows=settings.memory_exact_search_max_rows,
        )
        self._retriever = Retriever(
            settings=settings, embedder=embedder, vector_index=self.vector_index
        )
        self._maintenance: asyncio.Task[None] | None = None
        self._backfill_needed = asyncio.Event()
        self._connect_lock = asyncio.Lock()

    generate_session_key = staticmethod(generate_session_key)

    # ----------------------------------------------------------------- lifecycle

    async def connect(self, *, allow_model_change: bool = False) -> None:
        """Locate, migrate and pool the database; check the embedding model of stored rows."""
        async with self._connect_lock:
            if self._store is not None:
                return
            location = await locate_database(
                self.settings.memory_dsn.get_secret_value() if self.settings.memory_dsn else None,
                self.settings.memory_data_dir,
            )
            await prepare_database(location.dsn)
            pool = await create_pool(location.dsn, self.settings.memory_pool_size)
            store = PgDialogueStore(pool=pool)
            try:
                await self._check_embedding_model(store, location, allow_model_change)
                await self._check_keyword_analyzer(store)
            except BaseException:
                await pool.close()
                raise
            self._pool, self._store = pool, store
            self._evaluation_store = PgEvaluationStore(pool=pool)
            self.database_description = location.description
            self._backfill_needed.set()

    async def _check_embedding_model(
        self, store: PgDialogueStore, location: DatabaseLocation, allow_change: bool
    ) -> None:
        meta = await store.read_meta()
        stored_model, stored_dim = meta.get("embedding_model"), meta.get("embedding_dim")
        same = stored_model == self.embedding_model and stored_dim == str(self.embedding_dim)
        if (
            stored_model is not None
            and not same
            and not allow_change
            and await store.any_embedded()
        ):
            raise EmbeddingModelMismatchError(
                f"the memory in {location.description} was embedded with {stored_model} "
                f"({stored_dim}-d) but {self.embedding_model} ({self.embedding_dim}-d) is "
                f"configured. Run `{REEMBED_COMMAND}` to re-embed every stored turn with the "
                "configured model, or set EMBEDDING_PROVIDER / EMBEDDING_MODEL / EMBEDDING_DIM "
                "back to the stored model."
            )
        if allow_change and not same:
            return  # reembed() switches the metadata and the index itself
        await store.write_meta(
            {"embedding_model": self.embedding_model, "embedding_dim": str(self.embedding_dim)}
        )
        await self.vector_index.settle(store)

    def start_maintenance(self, interval: float = 30.0) -> None:
        """Run the background loop: reconnect, flush the spool, backfill embeddings."""
        if self._maintenance is None:
            self._maintenance = asyncio.create_task(self._maintenance_loop(interval))

    async def _maintenance_loop(self, interval: float) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._backfill_needed.wait(), timeout=interval)
            try:
                await self.connect()
                await self.flush_spool()
                if self._backfill_needed.is_set():
                    self._backfill_needed.clear()
                    await self.backfill_keywords()
                    await self.backfill_embeddings()
            except (DatabaseUnavailableError, EmbeddingError) as exc:
                log.warning("memory maintenance postponed: %s", exc)
                await asyncio.sleep(interval)
            except Exception:  # keep the loop alive; the next round retries
                log.exception("memory maintenance failed")
                await asyncio.sleep(interval)

    async def aclose(self) -> None:
        await self._close_distilled()
        if self.evaluations is not None:
            await self.evaluations.aclose()
        if self._maintenance is not None:
            self._maintenance.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._maintenance
            self._maintenance = None
        await self.vector_index.cancel_build()
        if self._pool is not None:
            await self._pool.close()
            self._pool, self._store, self._evaluation_store = None, None, None
        await self.embedder.aclose()

    @property
    def connected(self) -> bool:
        return self._store is not None

    def _require_store(self) -> PgDialogueStore:
        if self._store is None:
            raise DatabaseUnavailableError("the memory database is not connected")
        return self._store

    def _require_evaluation_store(self) -> PgEvaluationStore:
        if self._evaluation_store is None:
            raise DatabaseUnavailableError("the memory database is not connected")
        return self._evaluation_store

    # ----------------------------------------------------------------- writing

    def _prepare(self, turn: TurnInput, embedding: np.ndarray | None, now: datetime) -> NewTurnRow:
        return prepare_row(
            turn,
            now=now,
            max_chars=self.settings.memory_max_content_chars,
            token_counter=self.token_counter,
            embedding=embedding,
            embedding_model=self.embedding_model,
        )

    def check_turn(self, turn: TurnInput) -> None:
        """Raise ``InvalidTurnError`` if ``turn`` could not be stored; store nothing."""
        self._prepare(turn, None, datetime.now(timezone.utc))

    async def _embed_passages(self, texts: Sequence[str]) -> np.ndarray | None:
        try:
            return await self.embedder.embed_passages(texts)
        except EmbeddingError as exc:
            log.warning("embedding failed, %d turn(s) will be embedded later: %s", len(texts), exc)
            self._backfill_needed.set()
            return None

    async def add_turn(self, turn: TurnInput) -> AddOutcome:
        """Store one turn (embedded now, or later if the embedder fails).

        Raises ``InvalidTurnError`` for input that cannot be stored. When the database is
        unreachable the turn is spooled locally and ``AddOutcome.spooled`` is true.
        """
        now = datetime.now(timezone.utc)
        row = self._prepare(turn, None, now)  # validate before spending an embedding
        if turn.message_uuid is None:
            turn = _with_uuid(turn, row.message_uuid, row.created_at)
        vectors = await self._embed_passages([row.content])
        if vectors is not None:
            row = _replace_embedding(row, vectors[0], self.embedding_model)
        try:
            store = self._require_store()
            stored = await store.insert_turn(row)
            if stored is None:
                return AddOutcome(turn=await store.turn_by_uuid(row.message_uuid), duplicate=True)
            return AddOutcome(turn=stored)
        except DatabaseUnavailableError as exc:
            log.warning("database unreachable, turn spooled locally: %s", exc)
            await self._spool.append(turn)
            self._backfill_needed.set()
            return AddOutcome(turn=None, spooled=True)

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
        return await self.add_turn(
            TurnInput(
                user_id=user_id,
                role=role,
                content=content,
                group_id=group_id,
                sender_name=sender_name,
                message_id=message_id,
                **extra,
            )
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
        store = self._require_store()
        now = datetime.now(timezone.utc)
        rows = [self._prepare(turn, None, now) for turn in turns]
        inserted = 0
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            if embeddings is not None:
                vectors: np.ndarray | None = embeddings[start : start + len(chunk)]
            else:
                vectors = await self._embed_passages([row.content for row in chunk])
            if vectors is not None:
                chunk = [
                    _replace_embedding(row, vectors[i], self.embedding_model)
                    for i, row in enumerate(chunk)
                ]
            inserted += await store.insert_many(chunk)
            if progress is not None:
                progress(start + len(chunk), len(rows))
        return inserted

    @contextlib.asynccontextmanager
    async def vector_index_deferred(self) -> AsyncIterator[None]:
        """Drop the HNSW index for a bulk import; afterwards put it back if it is wanted.

        Inserting into a live HNSW index costs ~1 ms a row; one build at the end is far faster.
        Recall stays correct meanwhile: sessions are searched exactly when the index is absent.
        See ``memory_core.vector_index`` for when the index is wanted.
        """
        store = self._require_store()
        await self.vector_index.suspend(store)
        try:
            yield
        finally:
            await self.vector_index.settle(store, check_sessions=True)

    async def flush_spool(self) -> int:
        """Write spooled turns to the database, then forget the messages recalled meanwhile;
        returns how many turns were new."""
        spooled = await self._spool.read()
        if spooled.lines == 0:
            return 0
        written = await self.add_dialogues(spooled.turns) if spooled.turns else 0
        deleted = 0
        for recalled in spooled.recalled:  # after the turns: a recalled one may be among them
            deleted += await self._require_store().delete_qq_message(
                recalled.self_id, recalled.message_id
            )
        await self._spool.remove_first(spooled.lines)
        log.info(
            "flushed %d spooled turn(s) to the database (%d new); %d recalled message(s) "
            "forgotten (%d turn(s) deleted)",
            len(spooled.turns),
            written,
            len(spooled.recalled),
            deleted,
        )
        return written

    async def backfill_embeddings(self, batch_size: int | None = None) -> int:
        """Embed turns stored without an embedding; returns how many were embedded."""
        store = self._require_store()
        size = batch_size or self.settings.embedding_batch_size
        done = 0
        while True:
            pending = await store.pending_embeddings(size)
            if not pending:
                return done
            vectors = await self.embedder.embed_passages([content for _, content in pending])
            await store.set_embeddings(
                [row_id for row_id, _ in pending], vectors, self.embedding_model
            )
            done += len(pending)

    async def _check_keyword_analyzer(self, store: PgDialogueStore) -> None:
        # Terms made by another version of the analyser would not match today's queries.
        meta = await store.read_meta()
        if meta.get("keyword_analyzer") == KEYWORD_ANALYZER_VERSION:
            return
        if "keyword_analyzer" in meta:
            reset = await store.reset_keywords()
            log.info("keyword analyser changed, %d row(s) will get new keywords", reset)
        await store.write_meta({"keyword_analyzer": KEYWORD_ANALYZER_VERSION})

    async def backfill_keywords(self, batch_size: int = KEYWORD_BACKFILL_BATCH) -> int:
        """Make the keywords of rows stored without them (before migration 003, or after a
        change of the analyser); returns how many rows were filled."""
        store = self._require_store()
        done = 0
        while True:
            pending = await store.pending_keywords(batch_size)
            if not pending:
                return done
            await store.set_keywords(
                [(row_id, document_terms(content)) for row_id, content in pending]
            )
            done += len(pending)

    # ----------------------------------------------------------------- reading

    async def recall(
        self,
        user_id: int,
        query: str,
        group_id: int | None = None,
        *,
        top_n: int | None = None,
        window_size: int | None = None,
        now: datetime | None = None,
        roles: Sequence[Role] | None = None,
        keywords: Sequence[str] | None = None,
        mode: RetrievalMode | None = None,
        time_aware: bool | None = None,
    ) -> RecallResult:
        """Top-N anchors of this session, each widened by ±window turns; see
        :meth:`memory_core.retrieval.Retriever.recall` for the channels and filters."""
        return await self._retriever.recall(
            self._require_store(),
            user_id,
            query,
            group_id,
            top_n=top_n,
            window_size=window_size,
            now=now,
            roles=roles,
            keywords=keywords,
            mode=mode,
            time_aware=time_aware,
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
        result = await self.recall(
            user_id, query, group_id, top_n=top_n, window_size=window_size, now=now
        )
        return list(result.turns)

    def format_block(
        self,
        result: RecallResult,
        now: datetime | None = None,
        exclude_ids: Sequence[int] = (),
        max_tokens: int | None = None,
    ) -> MemoryBlock:
        """The time-stamped memory block for a prompt, within the token budget."""
        return build_memory_block(
            result.windows,
            now or datetime.now(timezone.utc),
            self.tz,
            self.token_counter,
            self.settings.memory_max_tokens if max_tokens is None else max_tokens,
            exclude_ids=exclude_ids,
        )

    async def recent_turns(
        self,
        user_id: int,
        group_id: int | None,
        *,
        limit: int,
        since: datetime,
        now: datetime | None = None,
    ) -> list[MemoryTurn]:
        """The session's latest live turns since ``since`` (at most ``limit``), in time order."""
        return await self._require_store().recent_turns(
            generate_session_key(user_id, group_id),
            since=since,
            now=now or datetime.now(timezone.utc),
            limit=limit,
        )

    async def last_turn_time(
        self, user_id: int, group_id: int | None, now: datetime | None = None
    ) -> datetime | None:
        return await self._require_store().last_turn_time(
            generate_session_key(user_id, group_id), now or datetime.now(timezone.utc)
        )

    # ----------------------------------------------------------------- deleting

    async def delete_message(self, self_id: int | None, message_id: int) -> int | None:
        """Delete the turn of a recalled QQ message; returns rows deleted, or ``None`` when
        the database is unreachable: the deletion is then spooled and done on reconnection."""
        try:
            return await self._require_store().delete_qq_message(self_id, message_id)
        except DatabaseUnavailableError as exc:
            log.warning("database unreachable, recall of message %d spooled: %s", message_id, exc)
            await self._spool.append_recall(RecalledMessage(self_id, message_id))
            self._backfill_needed.set()
            return None

    async def forget(
        self,
        *,
        user_id: int | None = None,
        group_id: int | None = None,
        private_only: bool = False,
        everything: bool = False,
    ) -> int:
        """Delete memories: a group session (user+group), a user's private chat
        (user+private_only), all of a user's rows (user), a whole group (group) or everything.

        Returns the turns deleted; the scope's distilled memories and cached answers go too."""
        deleted = await self._require_store().delete_scope(
            user_id=user_id, group_id=group_id, private_only=private_only, everything=everything
        )
        await self.forget_distilled(
            user_id=user_id, group_id=group_id, private_only=private_only, everything=everything
        )
        return deleted

    # ----------------------------------------------------------------- admin

    async def stats(self, now: datetime | None = None) -> MemoryStats:
        store_stats = await self._require_store().stats()
        cache_stats = getattr(self.embedder, "stats", None)
        evaluation_store = self._require_evaluation_store()
        today = (now or datetime.now(timezone.utc)).astimezone(self.tz).date()
        return MemoryStats(
            evaluation=EvaluationFigures(
                evaluator=self.evaluations.evaluator.name if self.evaluations else "off",
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
            embedding_cache=cache_stats() if callable(cache_stats) else {},
            vector_index=self.vector_index.state,
            exact_search_max_rows=self.settings.memory_exact_search_max_rows,
        )

    async def enqueue_evaluation(self, user_turn_id: int, assistant_turn_id: int) -> None:
        """Queue a finished exchange for scoring (no-op when evaluation is off).

        Returns at once; the exchange is kept without expiry until it is scored.
        """
        if self.evaluations is not None:
            await self.evaluations.enqueue(user_turn_id, assistant_turn_id)

    async def evaluate_pending(self, now: datetime | None = None) -> int:
        """Score every queued exchange that is due now; returns how many were settled."""
        if self.evaluations is None:
            return 0
        return await self.evaluations.run_once(now)

    async def purge_expired(self, now: datetime | None = None) -> int:
        """Delete expired rows in short batches; returns how many, and counts them per day."""
        store = self._require_evaluation_store()
        now = now or datetime.now(timezone.utc)
        total = 0
        while True:
            deleted = await store.purge_batch(now, self.settings.memory_purge_batch_size)
            total += deleted
            if deleted < self.settings.memory_purge_batch_size:
                break
        await store.bump(now.astimezone(self.tz).date(), PURGED, total)
        log.info("purged %d expired memory row(s)", total)
        return total

    async def reembed(self, *, batch_size: int = 256, progress: Progress | None = None) -> int:
        """Re-embed every row not embedded by the configured model; switch the vector index."""
        store = self._require_store()
        total = await store.count_needing_reembed(self.embedding_model)
        await self.vector_index.suspend(store)
        await store.write_meta(
            {"embedding_model": self.embedding_model, "embedding_dim": str(self.embedding_dim)}
        )
        done, last_id = 0, 0
        while True:
            rows = await store.rows_needing_reembed(self.embedding_model, last_id, batch_size)
            if not rows:
                break
            vectors = await self.embedder.embed_passages([content for _, content in rows])
            await store.set_embeddings(
                [row_id for row_id, _ in rows], vectors, self.embedding_model
            )
            done += len(rows)
            last_id = rows[-1][0]
            if progress is not None:
                progress(done, total)
        done += await self._reembed_distilled(batch_size)
        await self.vector_index.settle(store, check_sessions=True)
        return done

    # ------------------------------------------- distilled memory, context, answer cache (issue 5)
    # Built by open_memory; see memory_core.keeper, .extraction_worker, .answer_cache, .context.

    keeper: MemoryKeeper | None = None
    extraction: ExtractionWorker | None = None
    extraction_off: str | None = None  # why extraction is off, or None
    answer_cache: AnswerCache | None = None
    context_builder: ContextBuilder | None = None
    _distilled_stores: tuple[Any, PgDistilledStore, PgAnswerCacheStore] | None = None

    def _stores_of_pool(self) -> tuple[PgDistilledStore, PgAnswerCacheStore]:
        if self._pool is None:
            raise DatabaseUnavailableError("the memory database is not connected")
        if self._distilled_stores is None or self._distilled_stores[0] is not self._pool:
            stores = (PgDistilledStore(pool=self._pool), PgAnswerCacheStore(pool=self._pool))
            self._distilled_stores = (self._pool, *stores)
        return self._distilled_stores[1], self._distilled_stores[2]

    def distilled_store(self) -> PgDistilledStore:
        """The distilled-memory store of the current pool (``DatabaseUnavailableError`` if none)."""
        return self._stores_of_pool()[0]

    def answer_cache_store(self) -> PgAnswerCacheStore:
        return self._stores_of_pool()[1]

    def _require_keeper(self) -> MemoryKeeper:
        if self.keeper is None:
            raise DatabaseUnavailableError("distilled memory is not set up (use open_memory)")
        return self.keeper

    async def note_exchange(
        self, user_id: int, group_id: int | None = None, now: datetime | None = None
    ) -> bool:
        """Call after each stored exchange: counts it for extraction, which runs in the
        background every EXTRACTION_EVERY_TURNS exchanges or once the session is idle.
        Returns whether the session became due; a no-op (False) when extraction is off."""
        if self.extraction is None:
            return False
        return await self.extraction.note_exchange(user_id, group_id, now)

    async def extract_due(self, now: datetime | None = None) -> int:
        """Distil every due session now (N exchanges noted, or idle with exchanges waiting);
        the background task does this too, a scheduler may call it. Returns sessions done."""
        if self.extraction is None:
            return 0
        return await self.extraction.run_once(now)

    async def extract_session(
        self, user_id: int, group_id: int | None = None, now: datetime | None = None
    ) -> ExtractionReport | None:
        """Distil one session's undistilled turns now; ``None`` when extraction is off."""
        if self.extraction is None:
            return None
        return await self.extraction.extract_session(user_id, group_id, now)

    async def save_distilled(
        self,
        items: Sequence[ExtractedMemory],
        user_id: int,
        group_id: int | None = None,
        *,
        source_turn_ids: Sequence[int] = (),
        stated_at: datetime | None = None,
    ) -> SaveOutcome:
        """Store distilled items directly (deduplicated, merged, superseding as extracted)."""
        return await self._require_keeper().save(
            items,
            user_id=user_id,
            group_id=group_id,
            source_turn_ids=source_turn_ids,
            stated_at=stated_at or datetime.now(timezone.utc),
        )

    async def recall_distilled(
        self,
        user_id: int,
        group_id: int | None,
        query: str,
        *,
        kinds: Sequence[DistilledKind] = ("facts", "preferences"),
        top_k: int | None = None,
        now: datetime | None = None,
    ) -> list[DistilledHit]:
        """Current distilled memories for ``query`` ranked by similarity, time decay,
        importance and use (seed 000 ``recall``), in this session or the user scope."""
        return await self._require_keeper().recall(
            user_id,
            group_id,
            query,
            kinds=kinds,
            top_k=self.settings.memory_distilled_facts if top_k is None else top_k,
            now=now,
        )

    async def recall_by_type(
        self,
        user_id: int,
        group_id: int | None,
        kind: DistilledKind,
        *,
        limit: int = 20,
        now: datetime | None = None,
        include_history: bool = False,
    ) -> list[DistilledMemory]:
        """Seed 000 ``recall_by_type``: latest memories of one kind, no vector search;
        ``include_history`` adds superseded ones (with ``valid_until`` / ``superseded_by``)."""
        return await self._require_keeper().recall_by_type(
            user_id, group_id, kind, limit=limit, now=now, include_history=include_history
        )

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
    ) -> MemoryContext:
        """The memory text for a reply within MEMORY_MAX_TOKENS: preferences, relevant facts,
        recent summaries, then recalled dialogue (minus ``exclude_ids``, the short-term turns
        already in the messages). Pass ``recall`` to reuse a recall already made."""
        builder = self.context_builder or ContextBuilder(
            settings=self.settings,
            keeper=self.keeper,
            recall=self.recall,
            counter=self.token_counter,
            tz=self.tz,
        )
        return await builder.build(
            user_id,
            group_id,
            query,
            now=now,
            exclude_ids=exclude_ids,
            recall=recall,
            max_tokens=max_tokens,
        )

    async def maintain_distilled(self, now: datetime | None = None) -> MaintenanceReport:
        """Daily upkeep: merge near-duplicate memories, refresh importance, embed what is
        missing, drop expired cached answers."""
        report = await self._require_keeper().maintain()
        if self.answer_cache is not None:
            purged = await self.answer_cache.purge_expired(now)
            log.info("answer cache: %d expired entr(ies) removed", purged)
        return report

    async def forget_distilled(
        self,
        *,
        user_id: int | None = None,
        group_id: int | None = None,
        private_only: bool = False,
        everything: bool = False,
    ) -> int:
        """Delete a /forget scope's distilled memories and cached answers (``forget`` does this
        too); returns the distilled memories deleted."""
        scope = dict(
            user_id=user_id, group_id=group_id, private_only=private_only, everything=everything
        )
        deleted = await self.distilled_store().delete_scope(**scope)
        cached = await self.answer_cache_store().delete_scope(**scope)
        log.info("forgot %d distilled memor(ies) and %d cached answer(s)", deleted, cached)
        return deleted

    async def cached_answer(
        self,
        question: str,
        user_id: int,
        *,
        personal: bool = False,
        now: datetime | None = None,
    ) -> CachedAnswer | None:
        """The cached answer (ANSWER_CACHE_ENABLED) or ``None``. Pass ``personal=True`` when
        recall found memory of this person (``MemoryContext.personal``): nothing is served."""
        if self.answer_cache is None:
            return None
        return await self.answer_cache.lookup(question, user_id, personal=personal, now=now)

    async def cache_answer(
        self,
        question: str,
        answer: str,
        user_id: int,
        group_id: int | None = None,
        *,
        personal: bool = False,
        now: datetime | None = None,
    ) -> bool:
        """Cache a delivered answer for this user; refused for time-dependent or personal
        questions and when the cache is off. Returns whether it was stored."""
        if self.answer_cache is None:
            return False
        return await self.answer_cache.store(
            question, answer, user_id, group_id, personal=personal, now=now
        )

    async def preload_answer_cache(self, now: datetime | None = None) -> int:
        """(Re)load the public entries of ANSWER_CACHE_PRELOAD_FILE; 0 when the cache is off."""
        if self.answer_cache is None:
            return 0
        path = self.settings.config_file(
            self.settings.answer_cache_preload_file, "answer_cache_preload.jsonl"
        )
        return await self.answer_cache.preload(path, now)

    async def distilled_stats(self, now: datetime | None = None) -> DistilledStats:
        """Figures for /memstat (``lines_zh()``): distilled memories, extraction, answer cache."""
        store = self.distilled_store()
        cache = self.answer_cache
        return DistilledStats(
            counts=await store.counts(),
            totals=await store.metric_totals(date.min),
            extraction="开启" if self.extraction is not None else (self.extraction_off or "关闭"),
            waiting_sessions=await store.waiting_sessions(),
            cache_enabled=cache is not None,
            cache_entries=await cache.entry_counts(now) if cache is not None else {},
        )

    async def _reembed_distilled(self, batch_size: int) -> int:
        done = await self.keeper.reembed(batch_size=batch_size) if self.keeper else 0
        if self.answer_cache is not None:
            done += await self.answer_cache.reembed(batch_size=batch_size)
        return done

    async def _close_distilled(self) -> None:
        if self.extraction is not None:
            await self.extraction.aclose()
            self.extraction = None


def _with_uuid(turn: TurnInput, message_uuid: str, created_at: datetime) -> TurnInput:
    return dataclasses.replace(turn, message_uuid=message_uuid, created_at=created_at)


def _replace_embedding(row: NewTurnRow, vector: np.ndarray, model: str) -> NewTurnRow:
    return dataclasses.replace(row, embedding=vector, embedding_model=model)


async def open_memory(
    settings: MemorySettings,
    *,
    embedder: Embedder | None = None,
    evaluator: Evaluator | None = None,
    require_database: bool = True,
    allow_model_change: bool = False,
    maintenance_interval: float | None = 30.0,
) -> TemporalMemory:
    """Build the memory from settings: embedder, tokenizer, spool, database.

    With ``require_database=False`` an unreachable database is not fatal: turns are spooled
    and the maintenance loop keeps trying to connect. ``maintenance_interval=None`` disables
    the background loop (tests and the CLI drive maintenance by hand).
    """
    chosen_embedder = embedder or await build_embedder(settings)
    counter = await asyncio.to_thread(load_token_counter, settings.memory_token_encoding)
    spool = TurnSpool(settings.memory_data_dir / "spool.jsonl")
    retention = load_retention_policy(
        settings.config_file(settings.memory_retention_file, "retention.toml")
    )
    chosen_evaluator = evaluator if evaluator is not None else build_evaluator(settings)
    memory = TemporalMemory(
        settings=settings,
        embedder=chosen_embedder,
        token_counter=counter,
        spool=spool,
        evaluator=chosen_evaluator,
        retention=retention,
    )
    # Distilled memory, its background extraction, the answer cache, prompt assembly (issue 5).
    memory.keeper = MemoryKeeper(
        store=memory.distilled_store,
        embedder=chosen_embedder,
        scope=settings.memory_distilled_scope,
        dedupe_threshold=dedupe_threshold(chosen_embedder.model, settings.memory_dedupe_threshold),
    )
    extractor = build_extractor(settings, memory.tz) if settings.memory_distilled_enabled else None
    memory.extraction_off = (
        extraction_off_reason(settings) if settings.memory_distilled_enabled else "已关闭"
    )
    if extractor is not None:
        memory.extraction = ExtractionWorker(
            store=memory.distilled_store,
            keeper=memory.keeper,
            extractor=extractor,
            tz=memory.tz,
            every_turns=settings.extraction_every_turns,
            idle_minutes=settings.extraction_idle_minutes,
            concurrency=settings.extraction_concurrency,
            max_turns=settings.extraction_max_turns,
        )
    else:
        log.info("distilled memory extraction is off: %s", memory.extraction_off)
    if settings.answer_cache_enabled:
        memory.answer_cache = AnswerCache(
            store=memory.answer_cache_store,
            embedder=chosen_embedder,
            threshold=cache_threshold(chosen_embedder.model, settings.answer_cache_threshold),
            ttl=timedelta(hours=settings.answer_cache_ttl_hours),
            tz=memory.tz,
        )
    memory.context_builder = ContextBuilder(
        settings=settings,
        keeper=memory.keeper,
        recall=memory.recall,
        counter=counter,
        tz=memory.tz,
    )
    try:
        await memory.connect(allow_model_change=allow_model_change)
    except DatabaseUnavailableError as exc:
        if require_database:
            await chosen_embedder.aclose()
            raise
        log.error("memory database unreachable at start-up, will keep retrying: %s", exc)
    except BaseException:
        await chosen_embedder.aclose()
        raise
    if memory.answer_cache is not None and memory.connected:
        try:
            await memory.preload_answer_cache()
        except MemoryCoreError as exc:  # a bad preload file must not stop the bot
            log.error("answer cache preload failed: %s", exc)
    if maintenance_interval is not None:
        memory.start_maintenance(maintenance_interval)
        if memory.evaluations is not None:
            memory.evaluations.start()
        if memory.extraction is not None:
            memory.extraction.start()
    return memory
