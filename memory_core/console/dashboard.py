"""The ``/memstat`` dashboard: short Chinese lines in sections, readable on a phone.

Built from :class:`~memory_core.stats.MemoryStats` and
:class:`~memory_core.distill.stats.DistilledStats`; what only the caller knows (the chat model,
how long the bot has run) comes as :class:`Connection`. Each line aims at ``LINE_CHARS``
characters or fewer so a phone does not wrap it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from enum import Enum
from typing import TYPE_CHECKING

from ..answer_cache.cache import CACHE_MISS, CACHE_REFUSED
from ..distill.stats import DistilledStats
from ..distill.worker import (
    DISTILLED_MERGED,
    DISTILLED_SUPERSEDED,
    EXTRACTION_FAILED,
    EXTRACTION_GIVEN_UP,
    EXTRACTION_OK,
)
from ..providers.llm import OpenAIChatModel
from ..stats import GROUP_BOT, GROUP_USER, PRIVATE_BOT, PRIVATE_USER, MemoryStats

if TYPE_CHECKING:
    from ..parts import MemoryParts

LINE_CHARS = 40
BAR = "▇"
BAR_WIDTH = 10
# The band names of config/retention.toml; a band named otherwise is shown by its own name.
BAND_ZH = {"none": "不保留", "day": "一天", "week": "一周", "month": "一月", "forever": "永久"}
EVALUATOR_ZH = {"llm": "大模型", "heuristic": "启发式", "off": "已关闭"}
_LEVEL_ZH = {"user_exact": "用户精确", "public_exact": "公共精确", "semantic": "语义"}
_KIND_ZH = (("facts", "事实"), ("preferences", "偏好"), ("summary", "摘要"))


class DatabaseState(Enum):
    CONNECTED = "正常"
    DEGRADED = "写入受阻"
    DOWN = "连不上"


@dataclass(frozen=True)
class Connection:
    """What the dashboard's 连接 section says beyond the stats themselves."""

    database: DatabaseState
    embedded: bool
    chat_model: str | None  # None: not configured
    uptime: timedelta | None  # None: not a running bot (the CLI)
    trouble: str | None = None  # why writes go to the spool, while the database is degraded
    chat_calls: str | None = None  # how the chat model is called (``chat_calls_zh``)


def chat_calls_zh(model: object) -> str | None:
    """How the chat model is called, for the 连接 section: the memory tools on or off (and
    why), and whether calls are streamed; ``None`` for a model that cannot tell."""
    if not isinstance(model, OpenAIChatModel):
        return None
    if model.offers_tools:
        tools = "开"
    elif model.tools_mode == "off":
        tools = "关（CHAT_TOOLS=off）"
    else:
        tools = "关（模型拒绝了工具调用）"
    return f"记忆工具：{tools}" + ("；流式调用" if model.streams else "")


def connection_of(
    parts: MemoryParts, *, chat_model: str | None, uptime: timedelta | None = None
) -> Connection:
    """The 连接 section's facts about the memory of ``parts``: reachable, writing, embedded
    or not."""
    if not parts.database.connected:
        state = DatabaseState.DOWN
    elif parts.writer.write_trouble is not None:
        state = DatabaseState.DEGRADED
    else:
        state = DatabaseState.CONNECTED
    dsn = parts.settings.memory_dsn
    return Connection(
        database=state,
        embedded=not (dsn and dsn.get_secret_value()),
        chat_model=chat_model,
        uptime=uptime,
        trouble=parts.writer.write_trouble,
    )


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _shorten(text: str, room: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= room else text[: room - 1] + "…"


def _vector_index_zh(stats: MemoryStats) -> str:
    if stats.vector_index == "never":
        return "已关闭"
    if not stats.indexed_sessions and not stats.indexing_sessions:
        return "暂不需要"
    building = f"（{stats.indexing_sessions} 个建立中）" if stats.indexing_sessions else ""
    return f"{stats.indexed_sessions} 个会话{building}"


def uptime_zh(uptime: timedelta) -> str:
    """How long the bot has run, to the minute under a day and to the hour above."""
    minutes = int(uptime.total_seconds()) // 60
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    if days:
        return f"{days} 天 {hours} 小时"
    if hours:
        return f"{hours} 小时 {minutes} 分"
    return f"{minutes} 分钟"


def band_label(name: str) -> str:
    return BAND_ZH.get(name, name)


def band_bars(counts: dict[str, int]) -> list[str]:
    """One line per band: its Chinese name, a bar proportional to its count, the count."""
    if not counts:
        return ["评分分布：无"]
    labels = {name: band_label(name) for name in counts}
    width = max(len(label) for label in labels.values())
    top = max(counts.values())
    lines = []
    for name, count in counts.items():
        length = int(count / top * BAR_WIDTH + 0.5) if top else 0  # half rounds up
        if count and not length:
            length = 1  # a band with anything in it never looks empty
        label = labels[name].ljust(width, "\u3000")
        lines.append(f"{label} {BAR * length} {count}" if length else f"{label} {count}")
    return lines


def title_line(now: datetime, tz: tzinfo) -> str:
    return f"📊 记忆统计（截至 {now.astimezone(tz):%H:%M}）"


def storage_section(stats: MemoryStats, tz: tzinfo) -> list[str]:
    by = stats.store.by_type_role

    def day(dt: datetime | None) -> str:
        return "无" if dt is None else f"{dt.astimezone(tz):%Y-%m-%d}"

    lines = [
        "【存储】",
        f"对话 {stats.total_rows} 条 · 会话 {stats.store.sessions} 个 · "
        f"{stats.store.total_bytes / 1024 / 1024:.1f} MB",
        f"私聊：用户 {by.get(PRIVATE_USER, 0)} / 机器人 {by.get(PRIVATE_BOT, 0)}",
        f"群聊：用户 {by.get(GROUP_USER, 0)} / 机器人 {by.get(GROUP_BOT, 0)}",
        f"时间跨度：{day(stats.store.oldest)} 至 {day(stats.store.newest)}",
        f"向量模型：{stats.embedding_model}（{stats.embedding_dim} 维）",
        f"向量索引：{_vector_index_zh(stats)}",
        f"待补向量：{stats.store.pending_embeddings} 条",
        f"待写入（数据库不可用时暂存）：{stats.spooled_turns} 条",
        f"无法写入（死信）：{stats.dead_letters} 条",
    ]
    if stats.store.expired_not_purged:
        lines.append(f"已过期待清理：{stats.store.expired_not_purged} 条")
    if stats.store.bad_times:
        lines.append(f"时间超出范围（读取时跳过，待修复）：{stats.store.bad_times} 条")
    return lines


def evaluation_section(stats: MemoryStats) -> list[str]:
    figures = stats.evaluation
    evaluator = EVALUATOR_ZH.get(figures.evaluator, figures.evaluator)
    lines = [
        "【评估】",
        f"评估器：{evaluator} · 待评估 {figures.pending} 轮",
        f"成功率 {_percent(figures.success_rate)}"
        f"（成功 {figures.succeeded} / 失败 {figures.failed}）",
        f"长期保存率 {_percent(figures.save_rate)}",
        "保留时长分布：",
        *band_bars(figures.band_counts()),
    ]
    purged = [f"{d:%m-%d} 清理 {n} 条" for d, n in figures.purged_by_day if n]
    return [*lines, "近 7 天清理：" + ("无" if not purged else ""), *purged]


def distill_section(distilled: DistilledStats) -> list[str]:
    t = distilled.totals
    kinds = " · ".join(f"{name} {distilled.counts.get(kind, (0, 0))[0]}" for kind, name in _KIND_ZH)
    superseded = sum(history for _, history in distilled.counts.values())
    return [
        "【提炼】",
        f"现有：{kinds}" + (f"（历史 {superseded}）" if superseded else ""),
        f"提炼：{distilled.extraction}",
        f"成功 {t.get(EXTRACTION_OK, 0)} 次 · 失败 {t.get(EXTRACTION_FAILED, 0)} 次"
        f"（放弃 {t.get(EXTRACTION_GIVEN_UP, 0)}）",
        f"解析成功率 {_percent(distilled.parse_success_rate)} · "
        f"待提炼 {distilled.waiting_sessions} 个会话",
        f"去重合并 {t.get(DISTILLED_MERGED, 0)} · 被取代 {t.get(DISTILLED_SUPERSEDED, 0)}",
    ]


def cache_section(distilled: DistilledStats) -> list[str]:
    if not distilled.cache_enabled:
        return ["【缓存】", "回答缓存：未开启"]
    t = distilled.totals
    hits = " · ".join(f"{_LEVEL_ZH[level]} {n}" for level, n in distilled.cache_hits().items())
    return [
        "【缓存】",
        f"回答缓存：公共 {distilled.cache_entries.get('public', 0)} 条 · "
        f"用户 {distilled.cache_entries.get('user', 0)} 条",
        f"命中率 {_percent(distilled.cache_hit_rate)}",
        f"命中：{hits}",
        f"未命中 {t.get(CACHE_MISS, 0)} · 不可缓存 {t.get(CACHE_REFUSED, 0)}",
    ]


def prompt_cache_line(stats: MemoryStats) -> str:
    """Today's share of the chat model's prompt tokens the provider billed as cached."""
    share = stats.prompt_cache_share
    if share is None:
        return "提示词缓存（今日）：无记录"
    return (
        f"提示词缓存（今日）：{_percent(share)}"
        f"（{stats.cached_tokens_today}/{stats.prompt_tokens_today} 词元）"
    )


def connection_section(connection: Connection) -> list[str]:
    where = "内置" if connection.embedded else "外部"
    lines = ["【连接】", f"数据库：{connection.database.value}（{where} PostgreSQL）"]
    if connection.trouble:
        lines.append(_shorten(f"原因：{connection.trouble}", LINE_CHARS))
    lines.append(f"聊天模型：{connection.chat_model or '未配置'}")
    if connection.chat_calls:
        lines.append(connection.chat_calls)
    if connection.uptime is not None:
        lines.append(f"已运行：{uptime_zh(connection.uptime)}")
    return lines


def dashboard_zh(
    stats: MemoryStats,
    distilled: DistilledStats,
    connection: Connection,
    *,
    now: datetime,
    tz: tzinfo,
) -> str:
    """The whole ``/memstat`` reply: a title line, then 存储 / 评估 / 提炼 / 缓存 / 连接 (the
    缓存 section ends with today's share of prompt tokens the chat provider served cached)."""
    lines = [
        title_line(now, tz),
        *storage_section(stats, tz),
        *evaluation_section(stats),
        *distill_section(distilled),
        *cache_section(distilled),
        prompt_cache_line(stats),
        *connection_section(connection),
    ]
    return "\n".join(lines)


def unavailable_dashboard_zh(connection: Connection, *, now: datetime, tz: tzinfo) -> str:
    """What ``/memstat`` can still say while the database is unreachable."""
    return "\n".join(
        [
            title_line(now, tz),
            "记忆数据库暂时连不上，请稍后再试。",
            *connection_section(connection),
        ]
    )
