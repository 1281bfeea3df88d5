"""Evaluation and retention on the embedded PostgreSQL with a scripted loopback LLM."""

from __future__ import annotations

import asyncio
import re
import threading
from datetime import datetime, timedelta, timezone

import pytest

from memory_core import wiring
from memory_core.dialogue import upkeep
from memory_core.errors import ConfigError
from memory_core.evaluation.evaluator import (
    Exchange,
    heuristic_score,
    parse_batch_scores,
    parse_score,
)
from memory_core.evaluation.retention import load_retention_policy, policy_from_bands
from memory_core.evaluation.store import PgEvaluationStore
from memory_core.models import TurnInput
from memory_core.resources import DEFAULTS_DIR
from tests.fakes import Answer, ScriptedLLM

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(
    "answer", ["85", " 85\n", "85分", "评分：85", "<think>想想 3 和 4</think>85"]
)
def test_clear_scores_are_read(answer):
    assert parse_score(answer) == 85


@pytest.mark.parametrize("answer", ["", "很有价值", "85.5", "85/100", "101", "-3", "80 或 90"])
def test_unclear_scores_are_failures_not_guesses(answer):
    with pytest.raises(ValueError):
        parse_score(answer)


def test_batch_answers_map_by_number_and_missing_ones_fail():
    assert parse_batch_scores("1: 85\n3：10分\n2: 很好\n4: 50\n4: 60", 5) == [
        85,
        None,
        10,
        None,
        None,
    ]


def test_shipped_bands_map_scores_to_the_seed_retention():
    policy = load_retention_policy(DEFAULTS_DIR / "retention.toml")
    expected = {
        0: timedelta(0),
        20: timedelta(0),
        21: timedelta(days=1),
        40: timedelta(days=1),
        41: timedelta(days=7),
        70: timedelta(days=7),
        71: timedelta(days=30),
        90: timedelta(days=30),
        91: None,
        100: None,
    }
    for score, keep in expected.items():
        expires = policy.expires_at(score, T0)
        assert (expires is None) if keep is None else (expires == T0 + keep), score


def test_bands_with_a_gap_are_refused():
    with pytest.raises(ConfigError, match="without gaps"):
        policy_from_bands(
            [
                {"name": "low", "min": 0, "max": 40, "keep": "1d"},
                {"name": "high", "min": 50, "max": 100, "keep": "forever"},
            ]
        )


def test_heuristic_scores_small_talk_low_and_facts_and_questions_higher():
    low = [heuristic_score(Exchange(u, "好的")) for u in ("测试", "你好", "谢谢！", "在吗")]
    high = [
        heuristic_score(Exchange(u, "这是一个详细的回答。" * 10))
        for u in ("我叫小明，我住在杭州", "Docker 端口被占用怎么办？", "我的订单号是 ORD123456")
    ]
    assert max(low) <= 30 and min(high) >= 70


class Judge:
    """Scores by a keyword found in the exchange text; other modes for failures."""

    def __init__(self) -> None:
        self.mode = "ok"
        # "slow" answers wait for this: set when the test is over, or by a test that wants
        # the answer now. A timeout meant to be hit is then hit however slow the machine.
        self.release = threading.Event()

    def __call__(self, messages: list[dict[str, str]]) -> Answer:
        text = messages[-1]["content"]
        if self.mode == "garbage":
            return Answer("这段对话很有价值")
        if self.mode == "error":
            return Answer(status=500)
        if self.mode == "slow":
            return Answer("85", held=self.release)
        if "【回合" in text:  # batch prompt
            numbers = re.findall(r"【回合 (\d+)】\n用户：([^\n]*)", text)
            return Answer("\n".join(f"{n}: {self.score_of(u)}" for n, u in numbers))
        user = re.search(r"用户：([^\n]*)", text)
        return Answer(str(self.score_of(user.group(1) if user else "")))

    @staticmethod
    def score_of(user_text: str) -> int:
        for word, score in (("测试", 5), ("谢谢", 30), ("书", 60), ("Docker", 85), ("SSL", 95)):
            if word in user_text:
                return score
        return 50


@pytest.fixture
def judge():
    judge = Judge()
    server = ScriptedLLM(judge)
    judge.server = server
    yield judge
    judge.release.set()
    server.close()


def llm_settings(judge: Judge, **extra):
    return {
        "evaluator_base_url": judge.server.base_url,
        "evaluator_model": "judge",
        # Far longer than a loopback answer takes on a loaded machine; the test of a judge
        # that does not answer in time sets its own.
        "evaluator_timeout": 30.0,
        **extra,
    }


async def exchange(memory, user_text: str, reply: str, at: datetime, user_id: int = 1):
    user = await memory.parts.writer.add_turn(
        TurnInput(user_id=user_id, role="user", content=user_text, created_at=at)
    )
    bot = await memory.parts.writer.add_turn(
        TurnInput(
            user_id=user_id, role="assistant", content=reply, created_at=at + timedelta(seconds=5)
        )
    )
    await memory.parts.evaluations.enqueue(user.turn.id, bot.turn.id)
    return user.turn, bot.turn


async def turn_row(memory, turn_id: int):
    async with memory.parts.database.pool.acquire() as conn:  # test-only read of the raw columns
        return await conn.fetchrow("SELECT score, expires_at FROM dialogues WHERE id = $1", turn_id)


async def test_scores_set_both_turns_expiry_by_band(memory_factory, judge):
    memory = await memory_factory(**llm_settings(judge))
    cases = {
        "Docker 端口被占用": (85, timedelta(days=30)),
        "推荐一本书": (60, timedelta(days=7)),
        "如何配置SSL": (95, None),
        "谢谢": (30, timedelta(days=1)),
        "测试": (5, timedelta(0)),
    }
    made = {}
    for i, text in enumerate(cases):
        made[text] = await exchange(memory, text, "回答", T0 + timedelta(minutes=i))
    assert await memory.parts.evaluations.run_once(now=T0 + timedelta(hours=1)) == len(cases)
    for text, (score, keep) in cases.items():
        user, bot = made[text]
        for turn in (user, bot):
            row = await turn_row(memory, turn.id)
            assert row["score"] == score
            expected = None if keep is None else bot.created_at + keep
            assert row["expires_at"] == expected, text


async def test_garbage_answer_keeps_the_exchange_without_score_and_counts_it(memory_factory, judge):
    memory = await memory_factory(**llm_settings(judge))
    judge.mode = "garbage"
    user, _ = await exchange(memory, "我的生日是五月一日", "记住了", T0)
    await memory.parts.evaluations.run_once(now=T0)
    row = await turn_row(memory, user.id)
    assert row["score"] is None and row["expires_at"] is None
    figures = (await memory.stats()).evaluation
    assert figures.failed == 1 and figures.succeeded == 0 and figures.pending == 0


async def test_errors_and_timeouts_retry_then_keep_without_score(
    memory_factory, judge, monkeypatch
):
    memory = await memory_factory(**llm_settings(judge, evaluator_timeout=1.0))
    for mode in ("error", "slow"):
        judge.mode = mode
        user, _ = await exchange(memory, f"{mode} 的一轮对话", "回答", T0)
        now = T0
        for _attempt in range(3):  # postponed twice, then given up and kept unscored
            await memory.parts.evaluations.run_once(now=now)
            now += timedelta(hours=1)
        row = await turn_row(memory, user.id)
        assert row["score"] is None and row["expires_at"] is None
    figures = (await memory.stats()).evaluation
    assert figures.failed == 2 and figures.pending == 0


async def test_a_backlog_is_scored_in_batches(memory_factory, judge, monkeypatch):
    monkeypatch.setattr(wiring, "EVALUATION_CONCURRENCY", 1)
    monkeypatch.setattr(wiring, "EVALUATION_BATCH_SIZE", 5)
    memory = await memory_factory(**llm_settings(judge))
    texts = ["Docker 问题", "一本书", "测试", "SSL 证书", "谢谢", "随便聊聊"]
    turns = [
        await exchange(memory, t, "回答", T0 + timedelta(minutes=i)) for i, t in enumerate(texts)
    ]
    assert await memory.parts.evaluations.run_once(now=T0 + timedelta(hours=1)) == 6
    assert any("【回合 5】" in p for p in judge.server.prompt_texts())
    for text, (user, _) in zip(texts, turns, strict=True):
        assert (await turn_row(memory, user.id))["score"] == Judge.score_of(text)


async def test_enqueue_returns_before_a_slow_evaluation_finishes(memory_factory, judge):
    memory = await memory_factory(**llm_settings(judge))
    judge.mode = "slow"  # the judge answers only once released below
    memory.parts.evaluations.start()
    user, _ = await exchange(memory, "Docker 端口", "lsof -i", T0)
    # The exchange is durable and unscored right after enqueue; scoring happens later.
    assert (await turn_row(memory, user.id))["score"] is None
    judge.release.set()
    for _ in range(1200):  # polling for the score (60 s at most), not timing it
        if (await turn_row(memory, user.id))["score"] is not None:
            break
        await asyncio.sleep(0.05)
    assert (await turn_row(memory, user.id))["score"] == 85


async def test_low_scored_exchange_leaves_recall_while_high_scored_stays(memory_factory, judge):
    memory = await memory_factory(**llm_settings(judge))
    await exchange(memory, "测试 测试 你的猫", "你好", T0)
    await exchange(memory, "Docker 的猫咪镜像端口被占用", "用 lsof 查", T0 + timedelta(minutes=1))
    now = T0 + timedelta(minutes=10)
    await memory.parts.evaluations.run_once(now=now)
    recalled = await memory.parts.retriever.get_contextual_memory(
        1, "猫", top_n=5, window_size=0, now=now
    )
    assert [t.content for t in recalled if t.role == "user"] == ["Docker 的猫咪镜像端口被占用"]


async def test_purge_deletes_exactly_the_expired_rows(memory_factory, fresh_dsn, monkeypatch):
    monkeypatch.setattr(upkeep, "PURGE_BATCH", 100)  # 250 rows: three batches
    memory = await memory_factory()
    turns = [
        (
            await memory.parts.writer.add_turn(
                TurnInput(user_id=1, role="user", content=f"第{i}条", created_at=T0)
            )
        ).turn
        for i in range(250)
    ]
    expiries = {t.id: T0 + timedelta(days=i % 5) if i % 3 else None for i, t in enumerate(turns)}
    async with memory.parts.database.pool.acquire() as conn:
        await conn.executemany(
            "UPDATE dialogues SET expires_at = $2 WHERE id = $1", list(expiries.items())
        )
    # A row goes once it has been expired for the short-term window (it may still be part of
    # the conversation the model sees until then).
    window = timedelta(minutes=memory.parts.settings.chat_recent_minutes)
    clock = T0 + timedelta(days=2)
    expected_gone = {i for i, e in expiries.items() if e is not None and e <= clock - window}
    assert await memory.purge_expired(now=clock) == len(expected_gone)
    async with memory.parts.database.pool.acquire() as conn:
        left = {r["id"] for r in await conn.fetch("SELECT id FROM dialogues")}
    assert left == set(expiries) - expected_gone
    assert await memory.purge_expired(now=clock) == 0
    due_now = {i for i, e in expiries.items() if e is not None and clock - window < e <= clock}
    assert due_now and await memory.purge_expired(now=clock + window) == len(due_now)


async def test_pending_evaluations_and_figures_survive_a_restart(memory_factory, judge):
    first = await memory_factory(**llm_settings(judge))
    await exchange(first, "SSL 怎么配", "生成证书", T0)
    await exchange(first, "测试", "嗯", T0 + timedelta(minutes=1))
    await first.parts.evaluations.run_once(now=T0)  # both scored
    await exchange(first, "Docker 端口", "lsof", T0 + timedelta(minutes=2))
    await first.purge_expired(now=T0 + timedelta(hours=1))  # the "测试" exchange goes
    await first.aclose()  # one exchange still queued

    second = await memory_factory(**llm_settings(judge))
    assert (await second.stats()).evaluation.pending == 1
    assert await second.parts.evaluations.run_once(now=T0 + timedelta(hours=2)) == 1
    figures = (await second.stats(now=T0 + timedelta(hours=2))).evaluation
    assert figures.succeeded == 3 and figures.pending == 0
    assert figures.band_counts()["forever"] == 1 and figures.band_counts()["none"] == 1
    assert figures.save_rate == pytest.approx(2 / 3)
    assert sum(n for _, n in figures.purged_by_day) == 2
    lines = "\n".join((await second.stats()).lines_zh())
    assert "评估成功率：100.0%" in lines and "长期保存率：66.7%" in lines


async def test_without_llm_the_heuristic_evaluator_scores(memory_factory):
    memory = await memory_factory()  # no LLM configured
    assert memory.parts.evaluations.evaluator_name == "heuristic"
    user, _ = await exchange(memory, "你好", "你好！", T0)
    await memory.parts.evaluations.run_once(now=T0)
    assert (await turn_row(memory, user.id))["score"] == 15


async def test_evaluation_can_be_switched_off(memory_factory):
    memory = await memory_factory(evaluator_enabled=False)
    user, _ = await exchange(memory, "你好", "你好！", T0)  # queued: a no-op
    assert await memory.parts.evaluations.run_once(now=T0) == 0
    assert (await turn_row(memory, user.id))["score"] is None
    figures = (await memory.stats(T0)).evaluation
    assert (figures.evaluator, figures.pending) == ("off", 0)


async def test_two_bots_on_one_database_never_score_the_same_exchange(
    memory_factory, judge, monkeypatch
):
    monkeypatch.setattr(wiring, "EVALUATION_BATCH_SIZE", 1)
    first = await memory_factory(**llm_settings(judge))
    second = await memory_factory(**llm_settings(judge))
    for i in range(12):
        await exchange(first, f"第{i}个问题：书", "好的", T0 + timedelta(minutes=i))
    now = T0 + timedelta(hours=1)
    done = await asyncio.gather(
        first.parts.evaluations.run_once(now=now), second.parts.evaluations.run_once(now=now)
    )
    assert sum(done) == 12
    assert len(judge.server.requests) == 12  # each exchange asked about once
    assert (await first.stats(now=now)).evaluation.pending == 0


async def test_an_item_claimed_by_a_worker_that_died_is_due_again_after_its_lease(
    memory_factory, judge
):
    memory = await memory_factory(**llm_settings(judge))
    await exchange(memory, "书放在哪了", "在书架上", T0)
    store = memory.parts.database.store(PgEvaluationStore)
    assert len(await store.claim_due(T0, 10)) == 1  # claimed, then the worker "dies"
    assert (
        await memory.parts.evaluations.run_once(now=T0 + timedelta(minutes=1)) == 0
    )  # still leased
    assert await memory.parts.evaluations.run_once(now=T0 + timedelta(minutes=11)) == 1
