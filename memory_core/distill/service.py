"""``TemporalMemory.distilled``: distilled memory, its extraction and the answer cache.

One object over the parts that live beside the dialogue turns, on the memory's database pool:
facts, preferences and summaries (``keeper``), their background extraction (``extraction``,
``None`` when off) and the opt-in answer cache (``answer_cache``; ``AnswerCacheOff``, which
serves and keeps nothing, when off).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from ..answer_cache.cache import AnswerCache, AnswerCacheOff, cache_threshold
from ..answer_cache.store import PgAnswerCacheStore
from ..dialogue.forget_store import DeletedTurn
from ..models import ForgetScope, Forgotten
from ..providers.embedding import Embedder
from ..settings import MemorySettings
from ..storage.database_handle import Database, Transaction
from .extraction import build_extractor, extraction_off_reason
from .keeper import MaintenanceReport, MemoryKeeper
from .memory import (
    DistilledHit,
    DistilledKind,
    DistilledMemory,
    ExtractedMemory,
    SaveOutcome,
    dedupe_threshold,
)
from .stats import DistilledStats
from .store import PgDistilledStore
from .worker import ExtractionOff, ExtractionReport, ExtractionWorker

log = logging.getLogger(__name__)


class DistilledService:
    """Facts, preferences, summaries and cached answers, scoped like the dialogue turns."""

    def __init__(
        self,
        *,
        settings: MemorySettings,
        embedder: Embedder,
        tz: ZoneInfo,
        database: Database,
    ) -> None:
        self.settings = settings
        self._database = database
        self.keeper = MemoryKeeper(
            database=database,
            embedder=embedder,
            scope=settings.memory_distilled_scope,
            dedupe_threshold=dedupe_threshold(embedder.model, settings.memory_dedupe_threshold),
        )
        self.extraction: ExtractionWorker | ExtractionOff
        extractor = build_extractor(settings, tz) if settings.memory_distilled_enabled else None
        if extractor is not None:
            self.extraction = ExtractionWorker(
                database=database,
                keeper=self.keeper,
                extractor=extractor,
                tz=tz,
                every_turns=settings.extraction_every_turns,
                idle_minutes=settings.extraction_idle_minutes,
                concurrency=settings.extraction_concurrency,
                max_turns=settings.extraction_max_turns,
                settle_seconds=settings.extraction_settle_seconds,
            )
        else:
            reason = extraction_off_reason(settings) if settings.memory_distilled_enabled else None
            self.extraction = ExtractionOff(reason or "已关闭")
            # The reason above is for /memstat, in Chinese; the log says it in English.
            if not settings.memory_distilled_enabled:
                why = "MEMORY_DISTILLED_ENABLED=false"
            elif not settings.extraction_enabled:
                why = "EXTRACTION_ENABLED=false"
            else:
                why = "no model: EXTRACTION_MODEL and LLM_MODEL are empty"
            log.info("distilled memory extraction is off (%s)", why)
        self.answer_cache = (
            AnswerCache(
                database=database,
                embedder=embedder,
                threshold=cache_threshold(embedder.model, settings.answer_cache_threshold),
                ttl=timedelta(hours=settings.answer_cache_ttl_hours),
                tz=tz,
            )
            if settings.answer_cache_enabled
            else AnswerCacheOff()
        )

    def _distilled(self) -> PgDistilledStore:
        return self._database.store(PgDistilledStore)

    def _cache(self) -> PgAnswerCacheStore:
        return self._database.store(PgAnswerCacheStore)

    # ------------------------------------------------------------------ extraction

    def start(self) -> None:
        """Start the background extraction (when it is on)."""
        self.extraction.start()

    async def note_exchange(
        self, user_id: int, group_id: int | None = None, now: datetime | None = None
    ) -> bool:
        """Call after each stored exchange: counts it for extraction, which runs in the
        background every EXTRACTION_EVERY_TURNS exchanges or once the session is idle.
        Returns whether the session became due; a no-op (False) when extraction is off."""
        return await self.extraction.note_exchange(user_id, group_id, now)

    async def extract_due(self, now: datetime | None = None) -> int:
        """Distil every due session now (N exchanges noted, or idle with exchanges waiting);
        the background task does this too, a scheduler may call it. Returns sessions done."""
        return await self.extraction.run_once(now)

    async def extract_session(
        self, user_id: int, group_id: int | None = None, now: datetime | None = None
    ) -> ExtractionReport | None:
        """Distil one session's undistilled turns now; ``None`` when extraction is off."""
        return await self.extraction.extract_session(user_id, group_id, now)

    # ------------------------------------------------------------------ memories

    async def save(
        self,
        items: Sequence[ExtractedMemory],
        user_id: int,
        group_id: int | None = None,
        *,
        source_turn_ids: Sequence[int] = (),
        stated_at: datetime | None = None,
    ) -> SaveOutcome:
        """Store distilled items directly (deduplicated, merged, superseding as extracted)."""
        return await self.keeper.save(
            items,
            user_id=user_id,
            group_id=group_id,
            source_turn_ids=source_turn_ids,
            stated_at=stated_at or datetime.now(timezone.utc),
        )

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
        """Current distilled memories for ``query`` ranked by similarity, time decay,
        importance and use, in this session or the user scope; ``touch=False``: a look that
        does not count as a use (``/recall`` showing them)."""
        return await self.keeper.recall(
            user_id,
            group_id,
            query,
            kinds=kinds,
            top_k=self.settings.memory_distilled_facts if top_k is None else top_k,
            now=now,
            touch=touch,
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
        return await self.keeper.recall_by_type(
            user_id, group_id, kind, limit=limit, now=now, include_history=include_history
        )

    async def maintain(self, now: datetime | None = None) -> MaintenanceReport:
        """Daily upkeep: merge near-duplicate memories, refresh importance, embed what is
        missing, drop expired cached answers."""
        report = await self.keeper.maintain()
        await self.answer_cache.purge_expired(now)
        return report

    async def forget(self, scope: ForgetScope) -> Forgotten:
        """Delete a /forget scope's distilled memories and cached answers (``forget`` of the
        memory does this too); returns what was deleted, dialogue turns left at 0."""
        options = dataclasses.asdict(scope)
        by_kind = await self._distilled().delete_scope(**options)
        return _forgotten(by_kind, await self._cache().delete_scope(**options))

    async def count_scope(self, scope: ForgetScope) -> Forgotten:
        """What ``forget`` of ``scope`` would delete now (dialogue turns left at 0)."""
        options = dataclasses.asdict(scope)
        by_kind = await self._distilled().count_scope(**options)
        return _forgotten(by_kind, await self._cache().count_scope(**options))

    async def forget_turns(
        self, turns: Sequence[DeletedTurn], *, within: Transaction | None = None
    ) -> Forgotten:
        """Forget what deleted turns fed: distilled memories drawn from them, and the cached
        answers of their users since the earliest of them (in ``within``, if given)."""
        if not turns:
            return Forgotten()
        stores = within or self._database
        by_kind = await stores.store(PgDistilledStore).delete_from_sources([t.id for t in turns])
        cached = 0
        for user_id in {t.user_id for t in turns}:
            since = min(t.created_at for t in turns if t.user_id == user_id)
            cached += await stores.store(PgAnswerCacheStore).delete_user_since(user_id, since)
        return _forgotten(by_kind, cached)

    # ------------------------------------------------------------------ answer cache

    async def preload_answer_cache(self, now: datetime | None = None) -> int:
        """(Re)load the public entries of ANSWER_CACHE_PRELOAD_FILE; 0 when the cache is off."""
        path = self.settings.config_file(
            self.settings.answer_cache_preload_file, "answer_cache_preload.jsonl"
        )
        return await self.answer_cache.preload(path, now)

    # ------------------------------------------------------------------ upkeep

    async def stats(self, now: datetime | None = None) -> DistilledStats:
        """Figures for /memstat (``lines_zh()``): distilled memories, extraction, answer cache."""
        store = self._distilled()
        return DistilledStats(
            counts=await store.counts(),
            totals=await store.metric_totals(date.min),
            extraction=(
                self.extraction.reason if isinstance(self.extraction, ExtractionOff) else "开启"
            ),
            waiting_sessions=await store.waiting_sessions(),
            cache_enabled=self.answer_cache.enabled,
            cache_entries=await self.answer_cache.entry_counts(now),
        )

    async def reembed(self, batch_size: int) -> int:
        """Re-embed memories and cached questions embedded by another model."""
        done = await self.keeper.reembed(batch_size=batch_size)
        return done + await self.answer_cache.reembed(batch_size=batch_size)

    async def aclose(self) -> None:
        await self.extraction.aclose()
        self.extraction = ExtractionOff("已停止")


def _forgotten(by_kind: Mapping[str, int], cached_answers: int) -> Forgotten:
    return Forgotten(
        facts=by_kind.get("facts", 0),
        preferences=by_kind.get("preferences", 0),
        summaries=by_kind.get("summary", 0),
        cached_answers=cached_answers,
    )
