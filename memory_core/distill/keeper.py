"""``MemoryKeeper``: stores distilled memories and keeps them true.

* Exact duplicates (same normalised content in the session) raise ``times_mentioned`` and
  ``last_confirmed`` instead of adding rows; so do items the extraction LLM marks ``same_as``.
* Near-duplicates (cosine over the model's threshold *and* ``distilled.restates``) merge into
  the older row, at save time and in the daily maintenance.
* An item the extraction LLM marks as replacing older ones supersedes them: they keep their
  row as history, with ``valid_until`` (when they stopped being true) and ``superseded_by``,
  and recall no longer returns them as current.
* Recall ranks by similarity, time decay, importance and access frequency; what is recalled
  counts as used, which raises its importance.

Scope: rows belong to the session they were said in (a group user's statements to that user
in that group). ``scope="user"`` (MEMORY_DISTILLED_SCOPE) widens recall to all of the user's
chats; the same memory stored in two chats is then returned once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TypeVar

import numpy as np

from ..dialogue.source_store import PgSourceStore
from ..errors import EmbeddingError
from ..models import generate_session_key
from ..providers.embedding import Embedder
from ..settings import DistilledScope
from ..storage.database_handle import Database
from ..storage.paging import keyset_pages
from .memory import (
    DistilledHit,
    DistilledKind,
    DistilledMemory,
    ExtractedMemory,
    SaveOutcome,
    content_hash,
    embedding_text,
    memory_score,
    restates,
)
from .store import NewDistilled, PgDistilledStore

log = logging.getLogger(__name__)

# Candidates read per memory wanted: ranking reorders the nearest ones by importance and age.
CANDIDATES_PER_RESULT = 4
NEAR_DUPLICATE_CANDIDATES = 3
EMBED_BATCH = 64
_T = TypeVar("_T")


@dataclass(frozen=True)
class MaintenanceReport:
    """What one maintenance run did."""

    merged: int = 0
    importance_refreshed: int = 0
    embedded: int = 0


class MemoryKeeper:
    """Distilled memory of every session: save, recall, maintain, forget, re-embed."""

    def __init__(
        self,
        *,
        database: Database,
        embedder: Embedder,
        scope: DistilledScope,
        dedupe_threshold: float,
        recall_top_k: int = 5,
    ) -> None:
        """``recall_top_k``: how many memories ``recall`` returns unless told
        (``context.builder.DISTILLED_FACTS``)."""
        self._database = database
        self.embedder = embedder
        self.scope = scope
        self.dedupe_threshold = dedupe_threshold
        self.recall_top_k = recall_top_k

    def _store(self) -> PgDistilledStore:
        return self._database.store(PgDistilledStore)

    def _scope_user(self, user_id: int) -> int | None:
        # The store's scope filter: the session always, and every chat of the user if widened.
        return user_id if self.scope == "user" else None

    async def _embed(self, texts: Sequence[str]) -> np.ndarray | None:
        if not texts:
            return None
        try:
            return await self.embedder.embed_passages(texts)
        except EmbeddingError as exc:
            log.warning("distilled memory stored without embedding (backfilled later): %s", exc)
            return None

    # ---------------------------------------------------------------- saving

    async def save(
        self,
        items: Sequence[ExtractedMemory],
        user_id: int,
        group_id: int | None = None,
        *,
        source_turn_ids: Sequence[int] = (),
        stated_at: datetime | None = None,
        sources_must_exist: bool = False,
    ) -> SaveOutcome:
        """Store extracted items of one session, deduplicated, merged or superseding, all in
        one transaction; ``stated_at`` (default now) is when they were said.

        An item's sources are the turns it cites (``ExtractedMemory.source_turn_ids``) when it
        cites any of ``source_turn_ids``, else all of ``source_turn_ids`` (the batch).

        ``sources_must_exist`` (items just extracted from those turns): when any of
        ``source_turn_ids`` no longer exists (a /forget or 撤回 came while the items were
        extracted), nothing is stored and the outcome says ``discarded``.
        """
        items = [item for item in items if item.content.strip()]
        if not items:
            return SaveOutcome()
        session_key = generate_session_key(user_id, group_id)
        stated_at = stated_at or datetime.now(timezone.utc)
        vectors = await self._embed([item.embedding_text for item in items])
        outcome = SaveOutcome()
        locked = source_turn_ids if sources_must_exist else ()
        async with self._database.transaction() as tx:
            if not await tx.store(PgSourceStore).keep_turns(locked):
                return SaveOutcome(discarded=True)
            store = tx.store(PgDistilledStore)
            for index, item in enumerate(items):
                row = NewDistilled(
                    item=item,
                    session_key=session_key,
                    user_id=user_id,
                    group_id=group_id,
                    content_hash=content_hash(item.content),
                    source_turn_ids=_own_sources(item, source_turn_ids),
                    stated_at=stated_at,
                    embedding=vectors[index] if vectors is not None else None,
                    embedding_model=self.embedder.model if vectors is not None else None,
                )
                outcome += await self._save_one(store, row)
        return outcome

    async def _save_one(self, store: PgDistilledStore, row: NewDistilled) -> SaveOutcome:
        item = row.item
        if item.replaces:
            saved, inserted = await store.upsert(row)
            replaced = await store.supersede(
                item.replaces, new_id=saved.id, user_id=row.user_id, at=row.stated_at
            )
            return SaveOutcome(
                added=int(inserted),
                confirmed=int(not inserted),
                superseded=replaced,
                ids=(saved.id,),
            )
        if item.same_as is not None:
            confirmed = await store.confirm(item.same_as, row)
            if confirmed is not None:
                return SaveOutcome(confirmed=1, ids=(confirmed.id,))
        if row.embedding is not None:
            near = await store.nearest(
                kind=item.kind,
                session_key=row.session_key,
                user_id=None,  # merging stays inside the session the rows belong to
                now=row.stated_at,
                model=self.embedder.model,
                vector=row.embedding,
                limit=NEAR_DUPLICATE_CANDIDATES,
            )
            for existing, similarity in near:
                if similarity < self.dedupe_threshold:
                    break
                if not restates(existing.content, item.content):
                    continue
                confirmed = await store.confirm(existing.id, row)
                if confirmed is not None:
                    exact = content_hash(existing.content) == row.content_hash
                    return SaveOutcome(
                        confirmed=int(exact), merged=int(not exact), ids=(confirmed.id,)
                    )
        saved, inserted = await store.upsert(row)
        return SaveOutcome(added=int(inserted), confirmed=int(not inserted), ids=(saved.id,))

    # ---------------------------------------------------------------- reading

    async def recall(
        self,
        user_id: int,
        group_id: int | None,
        query: str,
        *,
        kinds: Sequence[DistilledKind] = ("facts", "preferences"),
        top_k: int | None = None,
        now: datetime | None = None,
        touch: bool = True,
    ) -> list[DistilledHit]:
        """The ``top_k`` (default ``recall_top_k``) current memories of these kinds best for
        ``query``.

        Only this session's memories, or the user's in every chat with the user scope. An
        unembeddable query recalls nothing (logged). Returned memories count as used, unless
        ``touch=False`` (a look, such as ``/recall`` showing them).
        """
        now = now or datetime.now(timezone.utc)
        top_k = self.recall_top_k if top_k is None else top_k
        if top_k <= 0 or not query.strip():
            return []
        try:
            vector = await self.embedder.embed_query(query)
        except EmbeddingError as exc:
            log.warning("distilled recall skipped, query not embedded: %s", exc)
            return []
        store = self._store()
        hits: list[DistilledHit] = []
        for kind in kinds:
            found = await store.nearest(
                kind=kind,
                session_key=generate_session_key(user_id, group_id),
                user_id=self._scope_user(user_id),
                now=now,
                model=self.embedder.model,
                vector=vector,
                limit=top_k * CANDIDATES_PER_RESULT,
            )
            for memory, similarity in found:
                age = (now - memory.last_confirmed).total_seconds() / 86400
                score = memory_score(
                    similarity,
                    age_days=age,
                    importance=memory.importance,
                    access_count=memory.access_count,
                )
                hits.append(DistilledHit(memory, similarity, score))
        hits.sort(key=lambda h: (-h.score, -h.memory.last_confirmed.timestamp(), -h.memory.id))
        chosen = _distinct(hits, key=lambda h: (h.memory.kind, content_hash(h.memory.content)))
        chosen = chosen[:top_k]
        if touch and chosen:
            await store.touch([h.memory.id for h in chosen], now)
        return chosen

    async def recall_by_type(
        self,
        user_id: int,
        group_id: int | None,
        kind: DistilledKind,
        *,
        limit: int = 20,
        now: datetime | None = None,
        by_importance: bool = False,
        include_history: bool = False,
    ) -> list[DistilledMemory]:
        """Seed 000 ``recall_by_type``: a scope's memories of one kind without vector search.

        Latest confirmed first (``by_importance``: most important first). Superseded memories
        only with ``include_history``.
        """
        now = now or datetime.now(timezone.utc)
        if limit <= 0:
            return []
        found = await self._store().by_kind(
            kind=kind,
            session_key=generate_session_key(user_id, group_id),
            user_id=self._scope_user(user_id),
            now=now,
            limit=limit * 2 if self.scope == "user" else limit,
            by_importance=by_importance,
            include_history=include_history,
        )
        if include_history:
            return found[:limit]
        return _distinct(found, key=lambda m: content_hash(m.content))[:limit]

    async def touch(self, ids: Sequence[int], now: datetime | None = None) -> None:
        """Count a use of these memories (they went into a prompt)."""
        await self._store().touch(ids, now or datetime.now(timezone.utc))

    # ---------------------------------------------------------------- upkeep

    async def backfill_embeddings(self, batch_size: int = EMBED_BATCH) -> int:
        """Embed distilled rows stored while the embedder was failing."""
        store = self._store()
        done = 0
        while True:
            rows = await store.pending_embeddings(batch_size)
            if not rows:
                return done
            vectors = await self.embedder.embed_passages(
                [embedding_text(kind, content, topics) for _, kind, content, topics in rows]
            )
            await store.set_embeddings([r[0] for r in rows], vectors, self.embedder.model)
            done += len(rows)

    async def maintain(self) -> MaintenanceReport:
        """Daily upkeep: embed what is missing, merge near-duplicates that
        restate each other (keeping the older row), refresh importance from use."""
        store = self._store()
        embedded = 0
        try:
            embedded = await self.backfill_embeddings()
        except EmbeddingError as exc:
            log.warning("distilled embedding backfill postponed: %s", exc)
        merged = 0
        gone: set[int] = set()
        for keep_id, drop_id, keep_text, drop_text in await store.duplicate_pairs(
            self.embedder.model, self.dedupe_threshold
        ):
            if keep_id in gone or drop_id in gone or not restates(keep_text, drop_text):
                continue
            if await store.merge(keep_id, drop_id):
                gone.add(drop_id)
                merged += 1
        refreshed = await store.refresh_importance()
        log.info(
            "distilled memory maintenance: %d merged, %d importance refreshed, %d embedded",
            merged,
            refreshed,
            embedded,
        )
        return MaintenanceReport(merged=merged, importance_refreshed=refreshed, embedded=embedded)

    async def reembed(self, *, batch_size: int = 256) -> int:
        """Re-embed every distilled row not embedded by the current model."""
        store, model = self._store(), self.embedder.model
        done = 0
        pages = keyset_pages(
            lambda last: store.rows_needing_reembed(model, last, batch_size), lambda r: r[0]
        )
        async for rows in pages:
            vectors = await self.embedder.embed_passages(
                [embedding_text(kind, content, topics) for _, kind, content, topics in rows]
            )
            await store.set_embeddings([r[0] for r in rows], vectors, model)
            done += len(rows)
        return done


def _own_sources(item: ExtractedMemory, batch: Sequence[int]) -> tuple[int, ...]:
    """The turns an item is drawn from: those it cites, if they are all of this batch; else
    the whole batch (a 撤回 of any of them then takes the item)."""
    cited = item.source_turn_ids
    if cited and set(cited) <= set(batch):
        return tuple(cited)
    return tuple(batch)


def _distinct(items: Sequence[_T], *, key: Callable[[_T], object]) -> list[_T]:
    seen: set[object] = set()
    kept = []
    for item in items:
        marker = key(item)
        if marker not in seen:
            seen.add(marker)
            kept.append(item)
    return kept
