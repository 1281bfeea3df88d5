"""Figures for ``/memstat`` and ``python -m memory_core stats``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from .dialogue.admin_store import PgAdminStore, StoreStats
from .evaluation.store import PgEvaluationStore
from .evaluation.worker import EVALUATED, FAILED, NOT_KEPT, PURGED, band_metric
from .providers.llm import CHAT_CACHED_TOKENS, CHAT_PROMPT_TOKENS
from .storage.counters import PgCounterStore

if TYPE_CHECKING:
    from .parts import MemoryParts

PRIVATE_USER, PRIVATE_BOT = ("private", "user"), ("private", "assistant")
GROUP_USER, GROUP_BOT = ("group", "user"), ("group", "assistant")


@dataclass(frozen=True)
class EvaluationFigures:
    """The evaluation figures ``/memstat`` shows, from the daily counters (they survive
    restarts)."""

    evaluator: str
    totals: dict[str, int]
    pending: int
    band_names: tuple[str, ...]
    purged_by_day: list[tuple[date, int]]

    @property
    def succeeded(self) -> int:
        return self.totals.get(EVALUATED, 0)

    @property
    def failed(self) -> int:
        return self.totals.get(FAILED, 0)

    @property
    def success_rate(self) -> float | None:
        attempts = self.succeeded + self.failed
        return self.succeeded / attempts if attempts else None

    @property
    def save_rate(self) -> float | None:
        """Share of settled exchanges kept in long-term memory (failures are kept unscored)."""
        settled = self.succeeded + self.failed
        return (settled - self.totals.get(NOT_KEPT, 0)) / settled if settled else None

    def band_counts(self) -> dict[str, int]:
        return {name: self.totals.get(band_metric(name), 0) for name in self.band_names}

    def lines_zh(self) -> list[str]:
        def percent(value: float | None) -> str:
            return "—" if value is None else f"{value:.1%}"

        bands = "，".join(f"{name} {n}" for name, n in self.band_counts().items()) or "无"
        purged = "，".join(f"{d:%m-%d} {n}" for d, n in self.purged_by_day) or "无"
        return [
            f"评估器：{self.evaluator}，待评估 {self.pending} 轮",
            f"评估成功率：{percent(self.success_rate)}"
            f"（成功 {self.succeeded}，失败 {self.failed}）",
            f"评分分布：{bands}",
            f"长期保存率：{percent(self.save_rate)}",
            f"近 7 天清理：{purged}",
        ]


@dataclass(frozen=True)
class MemoryStats:
    evaluation: EvaluationFigures
    store: StoreStats
    embedding_model: str
    embedding_dim: int
    database: str
    spooled_turns: int
    embedding_cache: dict[str, int] = field(default_factory=dict)
    vector_index: str = "auto"  # MEMORY_VECTOR_INDEX
    indexed_sessions: int = 0  # sessions with their own HNSW index
    indexing_sessions: int = 0  # ... being built
    exact_search_max_rows: int = 0
    dead_letters: int = 0  # items the database can never take (dialogue.spool)
    dead_letter_file: str = ""
    write_trouble: str | None = None  # why turns go to the spool now; None: writes work
    prompt_tokens_today: int = 0  # the chat model's prompt tokens today, as its answers report
    cached_tokens_today: int = 0  # ... of which the provider served from its prefix cache

    @property
    def prompt_cache_share(self) -> float | None:
        """Today's share of prompt tokens served from the provider's cache (None: none
        reported)."""
        if not self.prompt_tokens_today:
            return None
        return self.cached_tokens_today / self.prompt_tokens_today

    @property
    def total_rows(self) -> int:
        return sum(self.store.by_type_role.values())

    def lines_zh(self, tz: Any = None) -> list[str]:
        """Chinese lines for the /memstat command."""
        by = self.store.by_type_role

        def fmt(dt: datetime | None) -> str:
            if dt is None:
                return "无"
            return (dt.astimezone(tz) if tz else dt).strftime("%Y-%m-%d %H:%M:%S")

        lines = [
            f"记忆总数：{self.total_rows} 条，会话 {self.store.sessions} 个",
            f"私聊：用户 {by.get(PRIVATE_USER, 0)} / 助手 {by.get(PRIVATE_BOT, 0)}",
            f"群聊：用户 {by.get(GROUP_USER, 0)} / 助手 {by.get(GROUP_BOT, 0)}",
            f"存储占用：{self.store.total_bytes / 1024 / 1024:.1f} MB",
            f"最早：{fmt(self.store.oldest)}，最新：{fmt(self.store.newest)}",
            f"向量模型：{self.embedding_model}（{self.embedding_dim} 维）",
            f"向量索引：{self._vector_index_zh()}",
            f"待补向量：{self.store.pending_embeddings} 条",
            f"待写入（数据库不可用时暂存）：{self.spooled_turns} 条",
        ]
        if self.write_trouble is not None:
            lines.append(f"记忆写入受阻，新消息暂存本地，恢复后自动写入（{self.write_trouble}）")
        if self.dead_letters:
            lines.append(f"无法写入的消息：{self.dead_letters} 条，已移至 {self.dead_letter_file}")
        if self.store.expired_not_purged:
            lines.append(f"已过期待清理：{self.store.expired_not_purged} 条")
        if self.store.bad_times:
            lines.append(f"时间超出范围（读取时跳过，待修复）：{self.store.bad_times} 条")
        return lines + self.evaluation.lines_zh()

    def _vector_index_zh(self) -> str:
        if self.vector_index == "never":
            return "已关闭，全部精确检索"
        exact = f"不超过 {self.exact_search_max_rows} 条的会话精确检索"
        if not self.indexed_sessions and not self.indexing_sessions:
            return f"暂不需要（{exact}）"
        building = f"，{self.indexing_sessions} 个建立中" if self.indexing_sessions else ""
        return f"{self.indexed_sessions} 个大会话已建立{building}（{exact}）"


async def memory_stats(
    parts: MemoryParts, database: str, now: datetime | None = None
) -> MemoryStats:
    """The memory's figures now (``TemporalMemory.stats``); ``database``: where it is stored
    (``TemporalMemory.database_description``)."""
    stores = parts.database
    evaluation_store = stores.store(PgEvaluationStore)
    counters = stores.store(PgCounterStore)
    today = (now or datetime.now(timezone.utc)).astimezone(parts.tz).date()
    today_totals = await counters.metric_totals(today)
    settings, spool, embedder = parts.settings, parts.spool, parts.embedder
    cache_stats = getattr(embedder, "stats", None)
    return MemoryStats(
        evaluation=EvaluationFigures(
            evaluator=parts.evaluations.evaluator_name,
            totals=await counters.metric_totals(date.min),
            pending=await evaluation_store.pending_count(),
            band_names=parts.retention.band_names if parts.retention else (),
            purged_by_day=await counters.metric_by_day(PURGED, today - timedelta(days=6)),
        ),
        store=await stores.store(PgAdminStore).stats(),
        embedding_model=embedder.model,
        embedding_dim=embedder.dim,
        database=database,
        spooled_turns=spool.pending(),
        dead_letters=spool.dead_letters(),
        dead_letter_file=str(spool.dead_path),
        write_trouble=parts.writer.write_trouble,
        prompt_tokens_today=today_totals.get(CHAT_PROMPT_TOKENS, 0),
        cached_tokens_today=today_totals.get(CHAT_CACHED_TOKENS, 0),
        embedding_cache=cache_stats() if callable(cache_stats) else {},
        vector_index=settings.memory_vector_index,
        indexed_sessions=len(parts.vector_index.indexed),
        indexing_sessions=parts.vector_index.building,
        exact_search_max_rows=settings.memory_exact_search_max_rows,
    )
