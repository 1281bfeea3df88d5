"""Figures of distilled memory, its extraction and the answer cache, for ``/memstat``.

Counters come from the daily table (``memory_daily_stats``), so they survive restarts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime

from ..answer_cache.cache import (
    CACHE_MISS,
    CACHE_REFUSED,
    LEVELS,
    AnswerCache,
    AnswerCacheOff,
    hit_metric,
)
from ..storage.counters import PgCounterStore
from ..storage.database_handle import Database
from .store import PgDistilledStore
from .worker import (
    DISTILLED_MERGED,
    DISTILLED_SUPERSEDED,
    EXTRACTION_FAILED,
    EXTRACTION_GIVEN_UP,
    EXTRACTION_OK,
    EXTRACTION_PARSED,
    EXTRACTION_REJECTED,
    ExtractionOff,
    ExtractionWorker,
)

_KIND_ZH = (("facts", "事实"), ("preferences", "偏好"), ("summary", "摘要"))
_LEVEL_ZH = {"user_exact": "用户精确", "public_exact": "公共精确", "semantic": "语义"}


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


@dataclass(frozen=True)
class DistilledStats:
    """Counts of distilled memories and the counters of extraction and the answer cache."""

    counts: dict[str, tuple[int, int]]  # kind -> (current, history)
    totals: dict[str, int]  # daily counters summed
    extraction: str  # "llm" or why it is off
    waiting_sessions: int
    cache_enabled: bool
    cache_entries: dict[str, int] = field(default_factory=dict)

    @property
    def parse_success_rate(self) -> float | None:
        parsed = self.totals.get(EXTRACTION_PARSED, 0)
        answers = parsed + self.totals.get(EXTRACTION_REJECTED, 0)
        return parsed / answers if answers else None

    def cache_hits(self) -> dict[str, int]:
        return {level: self.totals.get(hit_metric(level), 0) for level in LEVELS}

    @property
    def cache_hit_rate(self) -> float | None:
        """Hits over cacheable lookups (refused questions are not lookups)."""
        hits = sum(self.cache_hits().values())
        lookups = hits + self.totals.get(CACHE_MISS, 0)
        return hits / lookups if lookups else None

    def lines_zh(self) -> list[str]:
        """Chinese lines the /memstat command appends."""
        kinds = "，".join(
            f"{name} {self.counts.get(kind, (0, 0))[0]}"
            + (f"（历史 {self.counts[kind][1]}）" if self.counts.get(kind, (0, 0))[1] else "")
            for kind, name in _KIND_ZH
        )
        t = self.totals
        lines = [
            f"提炼记忆：{kinds}",
            f"提炼：{self.extraction}，成功 {t.get(EXTRACTION_OK, 0)} 次，"
            f"失败 {t.get(EXTRACTION_FAILED, 0)} 次（放弃 {t.get(EXTRACTION_GIVEN_UP, 0)}），"
            f"解析成功率 {_percent(self.parse_success_rate)}，"
            f"待提炼会话 {self.waiting_sessions} 个",
            f"去重合并 {t.get(DISTILLED_MERGED, 0)} 条，"
            f"被新事实取代 {t.get(DISTILLED_SUPERSEDED, 0)} 条",
        ]
        if not self.cache_enabled:
            return [*lines, "语义缓存：未开启"]
        hits = "，".join(f"{_LEVEL_ZH[level]} {n}" for level, n in self.cache_hits().items())
        return [
            *lines,
            f"语义缓存：公共 {self.cache_entries.get('public', 0)} 条，"
            f"用户 {self.cache_entries.get('user', 0)} 条",
            f"缓存命中率：{_percent(self.cache_hit_rate)}（{hits}，未命中 {t.get(CACHE_MISS, 0)}，"
            f"不可缓存 {t.get(CACHE_REFUSED, 0)}）",
        ]


async def distilled_stats(
    database: Database,
    extraction: ExtractionWorker | ExtractionOff,
    answer_cache: AnswerCache | AnswerCacheOff,
    now: datetime | None = None,
) -> DistilledStats:
    """Figures for /memstat (``lines_zh()``): distilled memories, extraction, answer cache."""
    store = database.store(PgDistilledStore)
    return DistilledStats(
        counts=await store.counts(),
        totals=await database.store(PgCounterStore).metric_totals(date.min),
        extraction=extraction.reason if isinstance(extraction, ExtractionOff) else "开启",
        waiting_sessions=await store.waiting_sessions(),
        cache_enabled=answer_cache.enabled,
        cache_entries=await answer_cache.entry_counts(now),
    )
