"""``DialogueUpkeep``: what keeps the stored turns searchable — the checks made while connecting
(embedding model, keyword analyser, text form, time references), the backfills a maintenance
round runs, re-indexing in another text form, re-embedding with another model, the purge of
expired turns and the per-session vector indexes around bulk work."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime, timedelta

import asyncpg

from ..errors import EmbeddingModelMismatchError
from ..lang.indexed import IndexTexts
from ..lang.keywords import ANALYZER_VERSION as KEYWORD_ANALYZER_VERSION
from ..lang.keywords import document_terms
from ..providers.embedding import Embedder
from ..settings import MemorySettings
from ..storage.database_handle import Database
from ..storage.paging import keyset_pages
from .deferred_embeddings import DeferredEmbeddings
from .index_store import PgVectorIndexStore
from .time_references import TimeReferenceBackfill
from .upkeep_store import PgUpkeepStore
from .vector_index import VectorIndex

log = logging.getLogger(__name__)

# Expired rows deleted a statement at a time: short locks, and a purge that a restart cuts
# short loses nothing.
PURGE_BATCH = 5000

KEYWORD_BACKFILL_BATCH = 1000
TEXT_FORM_META = "indexed_text_form"
# One maintenance round re-indexes for about this long, then lets the spool and the
# backfills have their turn (the next round follows at once).
REINDEX_ROUND_SECONDS = 10.0
REEMBED_COMMAND = "python -m memory_core reembed"
Progress = Callable[[int, int], None]


class DialogueUpkeep:
    """The upkeep of the dialogue table, on the memory's ``Database``.

    ``on_more_work`` is called when a round stopped with work left (the next follows at once).
    """

    def __init__(
        self,
        *,
        settings: MemorySettings,
        database: Database,
        embedder: Embedder,
        vector_index: VectorIndex,
        deferred: DeferredEmbeddings,
        text_form: int,
        on_more_work: Callable[[], None],
    ) -> None:
        self._settings = settings
        self._database = database
        self._embedder = embedder
        self._vector_index = vector_index
        self._deferred = deferred
        self._text_form = text_form
        self._on_more_work = on_more_work
        self._reindex_after: int | None = None  # the walk's last id; None = no walk due
        # Rows stored before migration 008 get the time they talk about in the background.
        self.time_references = TimeReferenceBackfill(settings.tz)

    @property
    def reindex_due(self) -> bool:
        """Whether stored rows may still be indexed in another text form than the configured
        one (until a walk of ``reindex_text_form`` finds none)."""
        return self._reindex_after is not None

    def _upkeep(self) -> PgUpkeepStore:
        return self._database.store(PgUpkeepStore)

    def _indexes(self) -> PgVectorIndexStore:
        return self._database.store(PgVectorIndexStore)

    # ----------------------------------------------------------------- on connecting

    async def check(self, pool: asyncpg.Pool, where: str, *, allow_model_change: bool) -> None:
        """The checks made on a new pool before ``Database`` hands it out: the stored rows'
        embedding model (``EmbeddingModelMismatchError``; ``where`` names the database), the
        keyword analyser, the text form and the time-reference walk."""
        store = PgUpkeepStore(pool=pool)
        await self._check_embedding_model(
            store, PgVectorIndexStore(pool=pool), where, allow_model_change
        )
        await self._check_keyword_analyzer(store)
        await self._check_text_form(store)
        await self.time_references.check(store)

    async def _check_embedding_model(
        self,
        store: PgUpkeepStore,
        indexes: PgVectorIndexStore,
        where: str,
        allow_change: bool,
    ) -> None:
        model, dim = self._embedder.model, self._embedder.dim
        meta = await store.read_meta()
        stored_model, stored_dim = meta.get("embedding_model"), meta.get("embedding_dim")
        same = stored_model == model and stored_dim == str(dim)
        if (
            stored_model is not None
            and not same
            and not allow_change
            and await store.any_embedded()
        ):
            raise EmbeddingModelMismatchError(
                f"the memory in {where} was embedded with {stored_model} "
                f"({stored_dim}-d) but {model} ({dim}-d) is "
                f"configured. Run `{REEMBED_COMMAND}` to re-embed every stored turn with the "
                "configured model, or set EMBEDDING_PROVIDER / EMBEDDING_MODEL / EMBEDDING_DIM "
                "back to the stored model."
            )
        if allow_change and not same:
            return  # reembed() switches the metadata and the index itself
        await store.write_meta({"embedding_model": model, "embedding_dim": str(dim)})
        await self._vector_index.settle(indexes)

    async def _check_keyword_analyzer(self, store: PgUpkeepStore) -> None:
        # Terms made by another version of the analyser would not match today's queries.
        meta = await store.read_meta()
        if meta.get("keyword_analyzer") == KEYWORD_ANALYZER_VERSION:
            return
        if "keyword_analyzer" in meta:
            reset = await store.reset_keywords()
            log.info("keyword analyser changed, %d row(s) will get new keywords", reset)
        await store.write_meta({"keyword_analyzer": KEYWORD_ANALYZER_VERSION})

    async def _check_text_form(self, store: PgUpkeepStore) -> None:
        # The metadata names the form every row is in once a walk has found none in another.
        meta = await store.read_meta()
        if meta.get(TEXT_FORM_META) != str(self._text_form):
            self._reindex_after = 0

    # ----------------------------------------------------------------- a maintenance round

    async def run_round(self) -> None:
        """What one maintenance round does for the stored turns: keywords and embeddings still
        missing, then a slice of the re-index and of the time-reference walk when due."""
        await self.backfill_keywords()
        await self.backfill_embeddings()
        if self._reindex_after is not None:
            await self.reindex_text_form(max_seconds=REINDEX_ROUND_SECONDS)
        if self.time_references.due and not await self.time_references.run(
            self._upkeep(), max_seconds=REINDEX_ROUND_SECONDS
        ):
            self._on_more_work()  # the next round goes on at once

    async def backfill_embeddings(self, batch_size: int | None = None) -> int:
        """Embed turns stored without an embedding; returns how many were embedded (turns
        whose deferred embedding is still to come are left to it)."""
        store = self._upkeep()
        size = batch_size or self._settings.embedding_batch_size
        done = 0
        while True:
            rows = await store.pending_embeddings(size + len(self._deferred))
            pending = [row for row in rows if row[0] not in self._deferred][:size]
            if not pending:
                return done
            vectors = await self._embedder.embed_passages([text for _, text in pending])
            await store.set_embeddings(
                [row_id for row_id, _ in pending], vectors, self._embedder.model
            )
            done += len(pending)

    async def backfill_keywords(self, batch_size: int = KEYWORD_BACKFILL_BATCH) -> int:
        """Make the keywords of rows stored without them (before migration 003, or after a
        change of the analyser); returns how many rows were filled."""
        store = self._upkeep()
        done = 0
        while True:
            pending = await store.pending_keywords(batch_size)
            if not pending:
                return done
            await store.set_keywords([(row_id, document_terms(text)) for row_id, text in pending])
            done += len(pending)

    # ----------------------------------------------------------------- indexing again

    async def _index_again(
        self, store: PgUpkeepStore, rows: Sequence[tuple[int, IndexTexts]]
    ) -> None:
        """Embed and keyword ``(id, indexed texts)`` rows anew, in the configured form."""
        vectors = await self._embedder.embed_passages([texts.vector for _, texts in rows])
        terms = [(row_id, document_terms(texts.keywords)) for row_id, texts in rows]
        await store.set_indexed(terms, vectors, self._embedder.model, self._text_form)

    async def reindex_text_form(
        self, *, batch_size: int | None = None, max_seconds: float | None = None
    ) -> int:
        """Re-embed and re-keyword the rows indexed in another text form than the configured
        one (``MEMORY_INDEX_SPEAKER``; rows from before migration 007), in id order, a batch at
        a time; returns how many rows were done.

        With ``max_seconds`` it stops after about that long and the next call goes on from
        there (the maintenance loop calls it each round; a restart walks again from the first
        id, quickly past the rows already done). Once no row is left, the form is recorded in
        the metadata and later starts skip the walk.
        """
        store = self._upkeep()
        form = self._text_form
        size = batch_size or self._settings.embedding_batch_size
        after = self._reindex_after or 0
        if after == 0:
            total = await store.count_in_other_form(form)
            if total:
                log.info(
                    "re-indexing %d stored turn(s) in text form %d (MEMORY_INDEX_SPEAKER, "
                    "MEMORY_INDEX_CONTEXT) "
                    "in the background",
                    total,
                    form,
                )
        started = time.monotonic()
        done = 0
        pages = keyset_pages(
            lambda last: store.rows_in_other_form(form, last, size), _row_id, after=after
        )
        async for rows in pages:
            await self._index_again(store, rows)
            done += len(rows)
            self._reindex_after = rows[-1][0]
            if max_seconds is not None and time.monotonic() - started >= max_seconds:
                left = await store.count_in_other_form(form)
                log.info("re-indexing: %d turn(s) done this round, %d left", done, left)
                self._on_more_work()  # the next round goes on at once
                return done
        await store.write_meta({TEXT_FORM_META: str(form)})
        walked = self._reindex_after
        self._reindex_after = None
        if done or walked:
            log.info("re-indexing done: every stored turn is in text form %d", form)
        return done

    async def reembed(self, *, batch_size: int = 256, progress: Progress | None = None) -> int:
        """Re-embed (and re-keyword) every row not embedded by the configured model or not in
        the configured text form; switch the vector index. Returns how many rows."""
        store, indexes = self._upkeep(), self._indexes()
        model, form = self._embedder.model, self._text_form
        total = await store.count_needing_reembed(model, form)
        await self._vector_index.suspend(indexes)
        await store.write_meta({"embedding_model": model, "embedding_dim": str(self._embedder.dim)})
        done = 0
        pages = keyset_pages(
            lambda last: store.rows_needing_reembed(model, form, last, batch_size), _row_id
        )
        async for rows in pages:
            await self._index_again(store, rows)
            done += len(rows)
            if progress is not None:
                progress(done, total)
        await store.write_meta({TEXT_FORM_META: str(form)})
        self._reindex_after = None
        await self._vector_index.settle(indexes, check_sessions=True)
        return done

    # ----------------------------------------------------------------- purge and indexes

    async def purge_expired(self, now: datetime | None = None) -> tuple[datetime, int]:
        """Delete expired turns in short batches; (the moment purged at, how many).

        A turn goes once it has been expired for the short-term window
        (``CHAT_RECENT_MINUTES``): until then a "not kept" turn, gone from recall, still
        belongs to the conversation the model sees."""
        store = self._upkeep()
        now = now or await store.database_now()  # bots sharing the database share its clock
        expired_before = now - timedelta(minutes=self._settings.chat_recent_minutes)
        batch = PURGE_BATCH
        total = 0
        while True:
            deleted = await store.purge_expired(expired_before, batch)
            total += deleted
            if deleted < batch:
                break
        return now, total

    @contextlib.asynccontextmanager
    async def vector_index_deferred(self) -> AsyncIterator[None]:
        """Drop the sessions' HNSW indexes for a bulk import (a live index costs up to ~10 ms a
        row); afterwards (even on error) build the index of every session above
        MEMORY_EXACT_SEARCH_MAX_ROWS. Recall searches exactly meanwhile
        (``memory_core.dialogue.vector_index``)."""
        indexes = self._indexes()
        await self._vector_index.suspend(indexes)
        try:
            yield
        finally:
            await self._vector_index.settle(indexes, check_sessions=True)

    async def index_large_sessions(self) -> None:
        """Build now the HNSW index of every session above MEMORY_EXACT_SEARCH_MAX_ROWS that
        lacks one."""
        await self._vector_index.settle(self._indexes(), check_sessions=True)


def _row_id(row: tuple[int, IndexTexts]) -> int:
    return row[0]
