"""The /memstat dashboard text: a title, five sections, Chinese names, bars, short lines."""

from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from memory_core.console.dashboard import (
    BAR,
    LINE_CHARS,
    Connection,
    DatabaseState,
    dashboard_zh,
    unavailable_dashboard_zh,
)
from memory_core.dialogue.admin_store import StoreStats
from memory_core.distill.stats import DistilledStats
from memory_core.evaluation.worker import EVALUATED, band_metric
from memory_core.stats import EvaluationFigures, MemoryStats

SHANGHAI = ZoneInfo("Asia/Shanghai")
NOW = datetime(2026, 11, 30, 14, 5, tzinfo=timezone.utc)  # 22:05 in Shanghai


def figures(**counts: int) -> EvaluationFigures:
    totals = {band_metric(name): n for name, n in counts.items()}
    totals[EVALUATED] = sum(counts.values())
    return EvaluationFigures(
        evaluator="llm",
        totals=totals,
        pending=2,
        band_names=tuple(counts),
        purged_by_day=[(date(2026, 11, 29), 0), (date(2026, 12, 1), 6)],
    )


def memory_stats(evaluation: EvaluationFigures) -> MemoryStats:
    return MemoryStats(
        evaluation=evaluation,
        store=StoreStats(
            by_type_role={("private", "user"): 120, ("group", "assistant"): 80},
            sessions=12,
            oldest=NOW - timedelta(days=40),
            newest=NOW,
            pending_embeddings=3,
            expired_not_purged=0,
            total_bytes=5 * 1024 * 1024,
        ),
        embedding_model="BAAI/bge-small-zh-v1.5",
        embedding_dim=512,
        database="embedded PostgreSQL in /very/long/path/to/the/cluster/directory",
        spooled_turns=4,
        dead_letters=1,
    )


DISTILLED = DistilledStats(
    counts={"facts": (7, 2), "preferences": (3, 0), "summary": (1, 0)},
    totals={},
    extraction="开启",
    waiting_sessions=1,
    cache_enabled=True,
    cache_entries={"public": 5, "user": 2},
)
CONNECTION = Connection(
    database=DatabaseState.CONNECTED,
    embedded=True,
    chat_model="deepseek-chat",
    uptime=timedelta(days=2, hours=3, minutes=4),
)


def test_dashboard_has_a_title_five_sections_and_short_lines():
    stats = memory_stats(figures(none=2, day=4, week=8, month=1, forever=0, weird=1))
    text = dashboard_zh(stats, DISTILLED, CONNECTION, now=NOW, tz=SHANGHAI)
    lines = text.split("\n")
    assert "截至 22:05" in lines[0]
    sections = [line for line in lines if line.startswith("【")]
    assert sections == ["【存储】", "【评估】", "【提炼】", "【缓存】", "【连接】"]
    assert all(len(line) <= LINE_CHARS for line in lines), [
        line for line in lines if len(line) > LINE_CHARS
    ]


def test_bands_are_named_in_chinese_with_bars_proportional_to_counts():
    stats = memory_stats(figures(none=2, day=4, week=8, month=1, forever=0, weird=1))
    lines = dashboard_zh(stats, DISTILLED, CONNECTION, now=NOW, tz=SHANGHAI).split("\n")
    bar_of = {line.split()[0].strip("\u3000"): line.count(BAR) for line in lines if BAR in line}
    assert bar_of == {"不保留": 3, "一天": 5, "一周": 10, "一月": 1, "weird": 1}
    forever = next(line for line in lines if line.startswith("永久"))
    assert forever.endswith(" 0") and BAR not in forever  # an empty band: no bar
    assert not any(name in "\n".join(lines) for name in ("none", "day", "week", "forever"))


def test_evaluator_purges_spool_and_connection_read_as_words():
    stats = memory_stats(figures(day=1))
    text = dashboard_zh(stats, DISTILLED, CONNECTION, now=NOW, tz=SHANGHAI)
    assert "评估器：大模型 · 待评估 2 轮" in text
    assert "12-01 清理 6 条" in text and "11-29" not in text
    assert "待写入（数据库不可用时暂存）：4 条" in text
    assert "无法写入（死信）：1 条" in text
    assert "回答缓存：公共 5 条 · 用户 2 条" in text
    assert "数据库：正常（内置 PostgreSQL）" in text
    assert "聊天模型：deepseek-chat" in text and "已运行：2 天 3 小时" in text


def test_a_degraded_database_says_why_and_the_vector_index_is_one_short_line():
    stats = memory_stats(figures(day=1))
    degraded = Connection(
        DatabaseState.DEGRADED,
        embedded=True,
        chat_model=None,
        uptime=timedelta(minutes=5),
        trouble="ConnectionRefusedError: [Errno 111] Connect call failed ('127.0.0.1', 5432)",
    )
    lines = dashboard_zh(stats, DISTILLED, degraded, now=NOW, tz=SHANGHAI).split("\n")
    assert "数据库：写入受阻（内置 PostgreSQL）" in lines
    assert any(line.startswith("原因：ConnectionRefusedError") for line in lines)
    assert "向量索引：暂不需要" in lines and "已运行：5 分钟" in lines
    assert all(len(line) <= LINE_CHARS for line in lines)


def test_dashboard_while_the_database_is_down_still_shows_the_connection():
    down = Connection(DatabaseState.DOWN, embedded=False, chat_model=None, uptime=timedelta(0))
    lines = unavailable_dashboard_zh(down, now=NOW, tz=SHANGHAI).split("\n")
    assert "截至 22:05" in lines[0]
    assert "数据库：连不上（外部 PostgreSQL）" in lines and "聊天模型：未配置" in lines
    assert all(len(line) <= LINE_CHARS for line in lines)


def test_the_connection_says_how_the_chat_model_is_called():
    import httpx

    from memory_core.console.dashboard import chat_calls_zh
    from memory_core.errors import LLMError
    from memory_core.providers.llm import OpenAIChatModel
    from memory_core.providers.openai_api import OpenAIEndpoint

    def model(tools: str) -> OpenAIChatModel:
        client = httpx.AsyncClient(base_url="http://dashboard.invalid/v1")
        endpoint = OpenAIEndpoint(client, label="chat model", error=LLMError, max_retries=0)
        return OpenAIChatModel(endpoint, "m", tools=tools)  # type: ignore[arg-type]

    assert chat_calls_zh(model("auto")) == "记忆工具：开"
    assert chat_calls_zh(model("off")) == "记忆工具：关（CHAT_TOOLS=off）"
    assert chat_calls_zh(None) is None
    with_calls = Connection(
        DatabaseState.CONNECTED,
        embedded=True,
        chat_model="qwq-plus",
        uptime=None,
        chat_calls="记忆工具：开；流式调用",
    )
    lines = unavailable_dashboard_zh(with_calls, now=NOW, tz=SHANGHAI).split("\n")
    assert lines[lines.index("聊天模型：qwq-plus") + 1] == "记忆工具：开；流式调用"
