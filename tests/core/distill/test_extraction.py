"""Background extraction with a scripted loopback LLM on the embedded PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from memory_core.distill.worker import ExtractionOff
from memory_core.models import ForgetScope, RecalledMessage, TurnInput
from tests.fakes import Answer, ScriptedLLM

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)
GROUP_A = 1001


def prompt_kind(text: str) -> str:
    if "关键事实" in text:
        return "facts"
    if "偏好和习惯" in text:
        return "preferences"
    return "summary"


def conversation_of(text: str) -> str:
    return text.split("对话（每行开头是说话时间）：", 1)[1]


class Distiller:
    """Answers the three prompts from what the user said; other modes script failures."""

    def __init__(self) -> None:
        self.mode: dict[str, str] = {}
        self.gate: threading.Event | None = None  # when set up, every answer waits for it
        # Answers wait until this many have been in flight at once (the first of them waits
        # for the others): concurrency is seen, not hoped for from a slow answer.
        self.meet = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Condition()

    def __call__(self, messages: list[dict[str, str]]) -> Answer:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self._lock.notify_all()
            # Bounded only against a stuck test: serial code fails the test after it.
            self._lock.wait_for(lambda: self.max_in_flight >= self.meet, timeout=60)
        try:
            if self.gate is not None:
                self.gate.wait(timeout=300)
            return self.answer(messages[-1]["content"])
        finally:
            with self._lock:
                self.in_flight -= 1

    def answer(self, prompt: str) -> Answer:
        kind = prompt_kind(prompt)
        mode = self.mode.get(kind, "ok")
        if mode == "error":
            return Answer(status=500)
        if mode == "garbage":
            return Answer("这段对话里用户提到了住址，但我不确定怎么整理。")
        said = conversation_of(prompt)
        if kind == "facts":
            facts = []
            if "我住在北京" in said:
                facts.append(
                    '{"fact": "用户住在北京", "category": "personal_info", "confidence": 0.9}'
                )
            if "我搬到上海了" in said:
                known = re.search(r"\[(\d+)\] 用户住在北京", prompt)
                replaces = f', "replaces": [{known.group(1)}]' if known else ""
                facts.append(
                    '{"fact": "用户住在上海", "category": "personal_info", "confidence": 0.9'
                    + replaces
                    + "}"
                )
            if "我在杭州上班" in said:
                facts.append('{"fact": "用户在杭州上班", "category": "work"}')
            return Answer("```json\n[" + ",\n".join(facts) + "]\n```")
        if kind == "preferences":
            if "简短" in said:
                return Answer(
                    '[{"preference": "喜欢简短的回答", "category": "communication_style",'
                    ' "strength": 0.8, "evidence": ["请回答简短一点"]},]'
                )
            return Answer("[]")
        return Answer(
            '以下是摘要：{"summary": "用户聊了住处和工作。", "key_topics": ["住处", "工作"],'
            ' "sentiment": "neutral", "action_items": []}'
        )


@pytest.fixture
def distiller():
    distiller = Distiller()
    server = ScriptedLLM(distiller)
    distiller.server = server
    yield distiller
    server.close()


def llm_settings(distiller: Distiller, **extra):
    return {
        "extraction_base_url": distiller.server.base_url,
        "extraction_model": "distiller",
        # Far longer than a held answer is held on a loaded machine (no test here expects
        # the extractor to time out).
        "extraction_timeout": 60.0,
        # Turns are distilled as soon as they are due here; the wait for QQ's 撤回 window
        # (EXTRACTION_SETTLE_SECONDS) has tests of its own below.
        "extraction_settle_seconds": 0,
        **extra,
    }


async def exchange(
    memory, text: str, at: datetime, user_id: int = 1, group_id=None, message_id=None
):
    user = await memory.parts.writer.add_turn(
        TurnInput(
            user_id=user_id,
            group_id=group_id,
            role="user",
            content=text,
            created_at=at,
            message_id=message_id,
        )
    )
    bot = await memory.parts.writer.add_turn(
        TurnInput(
            user_id=user_id,
            group_id=group_id,
            role="assistant",
            content="好的，记住了。",
            created_at=at + timedelta(seconds=5),
        )
    )
    due = await memory.parts.extraction.note_exchange(
        user_id, group_id, now=at + timedelta(seconds=5)
    )
    return user.turn, bot.turn, due


async def turn_count(memory) -> int:
    async with memory.parts.database.pool.acquire() as conn:  # test-only
        return int(await conn.fetchval("SELECT count(*) FROM dialogues"))


async def distilled_contents(memory) -> list[str]:
    """Every distilled row, current or history, of every session."""
    async with memory.parts.database.pool.acquire() as conn:  # test-only
        return [r["content"] for r in await conn.fetch("SELECT content FROM distilled_memories")]


async def held_extraction(memory, distiller: Distiller, now: datetime) -> asyncio.Task[int]:
    """Start distilling the due sessions and return once the model is reading them; its
    answers wait until ``distiller.gate`` is set."""
    distiller.gate = threading.Event()
    task = asyncio.create_task(memory.parts.extraction.run_once(now))
    deadline = time.monotonic() + 60  # polling for the condition, not timing it
    while time.monotonic() < deadline:
        if distiller.in_flight:
            return task
        await asyncio.sleep(0.01)
    distiller.gate.set()
    raise AssertionError("the extraction never reached the model")


async def test_extraction_runs_every_n_exchanges_in_the_background_never_on_note(
    memory_factory, distiller
):
    memory = await memory_factory(**llm_settings(distiller, extraction_every_turns=2))
    *first, due = await exchange(memory, "我住在北京", T0)
    assert due is False
    *second, due = await exchange(memory, "请回答简短一点", T0 + timedelta(minutes=1))
    assert due is True
    assert distiller.server.requests == []  # noting an exchange never calls the model

    assert await memory.parts.extraction.run_once(T0 + timedelta(minutes=2)) == 1
    assert {prompt_kind(p) for p in distiller.server.prompt_texts()} == {
        "facts",
        "preferences",
        "summary",
    }
    now = T0 + timedelta(minutes=3)
    [fact] = await memory.parts.keeper.recall_by_type(1, None, "facts", now=now)
    assert (fact.content, fact.category, fact.confidence) == ("用户住在北京", "personal_info", 0.9)
    assert fact.session_key == "1" and fact.group_id is None
    assert set(fact.source_turn_ids) == {t.id for t in (*first, *second)}
    [preference] = await memory.parts.keeper.recall_by_type(1, None, "preferences", now=now)
    assert preference.evidence == ("请回答简短一点",)
    assert (
        await memory.parts.extraction.run_once(T0 + timedelta(minutes=4)) == 0
    )  # nothing left to do


async def test_a_session_under_n_exchanges_is_distilled_once_it_has_been_idle(
    memory_factory, distiller
):
    memory = await memory_factory(**llm_settings(distiller))  # idle after 30 minutes
    await exchange(memory, "我在杭州上班", T0)
    assert await memory.parts.extraction.run_once(T0 + timedelta(minutes=10)) == 0
    assert distiller.server.requests == []
    assert await memory.parts.extraction.run_once(T0 + timedelta(minutes=31)) == 1
    facts = await memory.parts.keeper.recall_by_type(1, None, "facts", now=T0 + timedelta(hours=1))
    assert [f.content for f in facts] == ["用户在杭州上班"]


async def test_a_move_reported_later_supersedes_the_old_fact_through_extraction(
    memory_factory, distiller
):
    memory = await memory_factory(**llm_settings(distiller, extraction_every_turns=1))
    await exchange(memory, "我住在北京", T0)
    await memory.parts.extraction.run_once(T0 + timedelta(minutes=1))
    moved = T0 + timedelta(days=30)
    await exchange(memory, "我搬到上海了", moved)
    await memory.parts.extraction.run_once(moved + timedelta(minutes=1))

    second_facts_prompt = [p for p in distiller.server.prompt_texts() if "关键事实" in p][-1]
    assert "[1] 用户住在北京" in second_facts_prompt  # known facts are shown, numbered
    later = moved + timedelta(days=1)
    found = await memory.parts.keeper.recall(1, None, "用户住在哪里", now=later)
    assert [h.memory.content for h in found] == ["用户住在上海"]
    history = await memory.parts.keeper.recall_by_type(
        1, None, "facts", now=later, include_history=True
    )
    old = next(f for f in history if f.content == "用户住在北京")
    assert (
        old.valid_until == moved + timedelta(seconds=5) and old.superseded_by == found[0].memory.id
    )


async def test_statements_in_a_group_belong_to_that_user_in_that_group(memory_factory, distiller):
    memory = await memory_factory(**llm_settings(distiller, extraction_every_turns=1))
    await exchange(memory, "我在杭州上班", T0, group_id=GROUP_A)
    await memory.parts.extraction.run_once(T0 + timedelta(minutes=1))
    now = T0 + timedelta(hours=1)
    [fact] = await memory.parts.keeper.recall_by_type(1, GROUP_A, "facts", now=now)
    assert (fact.session_key, fact.user_id, fact.group_id) == (f"{GROUP_A}:1", 1, GROUP_A)
    assert await memory.parts.keeper.recall(1, None, "用户在哪上班", now=now) == []


async def test_unreadable_answers_are_rejected_counted_and_no_turn_is_lost(
    memory_factory, distiller
):
    memory = await memory_factory(**llm_settings(distiller, extraction_every_turns=1))
    distiller.mode = {"facts": "garbage"}
    for i in range(2):
        await exchange(memory, f"我住在北京，第{i}次说", T0 + timedelta(minutes=i))
    report = await memory.parts.extraction.extract_session(1, None, now=T0 + timedelta(minutes=5))
    assert report.rejected == ("facts",) and report.saved.added == 1  # the summary
    assert await turn_count(memory) == 4
    stats = await memory.distilled_stats()
    assert (stats.totals["extraction_rejected"], stats.totals["extraction_parsed"]) == (1, 2)
    assert stats.parse_success_rate == pytest.approx(2 / 3)
    assert any("解析成功率 66.7%" in line for line in stats.lines_zh())


async def test_a_failing_model_is_retried_later_then_given_up_without_losing_turns(
    memory_factory, distiller
):
    memory = await memory_factory(**llm_settings(distiller, extraction_every_turns=1))
    distiller.mode = {"facts": "error"}
    await exchange(memory, "我住在北京", T0)
    assert (
        await memory.parts.extraction.run_once(T0 + timedelta(minutes=1)) == 0
    )  # failed, postponed
    assert (
        await memory.parts.extraction.run_once(T0 + timedelta(minutes=2)) == 0
    )  # not due yet (backoff)
    assert await memory.parts.extraction.run_once(T0 + timedelta(minutes=7)) == 0  # second failure
    assert (
        await memory.parts.extraction.run_once(T0 + timedelta(minutes=30)) == 1
    )  # third: given up
    stats = await memory.distilled_stats()
    assert (stats.totals["extraction_failed"], stats.totals["extraction_given_up"]) == (3, 1)
    assert stats.waiting_sessions == 0
    assert await turn_count(memory) == 2
    assert (
        await memory.parts.keeper.recall_by_type(1, None, "facts", now=T0 + timedelta(hours=1))
        == []
    )

    distiller.mode = {}  # the model is back: later turns are distilled as usual
    await exchange(memory, "我在杭州上班", T0 + timedelta(hours=1))
    assert await memory.parts.extraction.run_once(T0 + timedelta(hours=2)) == 1
    facts = await memory.parts.keeper.recall_by_type(1, None, "facts", now=T0 + timedelta(hours=3))
    assert [f.content for f in facts] == ["用户在杭州上班"]


async def test_sessions_are_distilled_concurrently_within_the_bound(memory_factory, distiller):
    memory = await memory_factory(**llm_settings(distiller, extraction_every_turns=1))
    for user in range(1, 6):
        await exchange(memory, "我在杭州上班", T0, user_id=user)
    distiller.meet = 2
    assert await memory.parts.extraction.run_once(T0 + timedelta(minutes=1)) == 5
    assert distiller.max_in_flight == 2
    for user in range(1, 6):
        facts = await memory.parts.keeper.recall_by_type(
            user, None, "facts", now=T0 + timedelta(hours=1)
        )
        assert [f.content for f in facts] == ["用户在杭州上班"]


async def test_extraction_is_off_without_a_model_and_says_so_once(memory_factory, caplog):
    with caplog.at_level(logging.INFO, logger="memory_core.wiring"):
        memory = await memory_factory()
    assert isinstance(memory.parts.extraction, ExtractionOff)
    assert [r.message for r in caplog.records if "extraction is off" in r.message] == [
        "distilled memory extraction is off (no model: EXTRACTION_MODEL and LLM_MODEL are empty)"
    ]
    await exchange(memory, "我住在北京", T0)
    assert await memory.parts.extraction.note_exchange(1, None) is False
    assert await memory.parts.extraction.run_once() == 0
    assert any("未配置模型" in line for line in (await memory.distilled_stats()).lines_zh())


async def test_extraction_can_be_disabled_even_with_a_model(memory_factory, distiller):
    memory = await memory_factory(**llm_settings(distiller, extraction_enabled=False))
    extraction = memory.parts.extraction
    assert isinstance(extraction, ExtractionOff)
    assert extraction.reason == "已关闭（EXTRACTION_ENABLED=false）"


async def test_a_fresh_turn_waits_out_the_recall_window_before_it_is_distilled(
    memory_factory, distiller
):
    memory = await memory_factory(
        **llm_settings(distiller, extraction_every_turns=1, extraction_settle_seconds=120)
    )
    first = await exchange(memory, "我住在北京", T0)
    # Due at once (one exchange), but the turns are 30 s old: nothing is sent to the model.
    await memory.parts.extraction.run_once(T0 + timedelta(seconds=30))
    assert distiller.server.requests == []
    # The session is deferred, not dropped: once the turns are two minutes old they are distilled.
    assert await memory.parts.extraction.run_once(T0 + timedelta(seconds=100)) == 0
    assert await memory.parts.extraction.run_once(T0 + timedelta(seconds=126)) == 1
    [fact] = await memory.parts.keeper.recall_by_type(
        1, None, "facts", now=T0 + timedelta(minutes=3)
    )
    assert set(fact.source_turn_ids) == {t.id for t in first[:2]}


async def test_only_settled_turns_are_distilled_and_the_rest_follow(memory_factory, distiller):
    memory = await memory_factory(
        **llm_settings(distiller, extraction_every_turns=1, extraction_settle_seconds=120)
    )
    old = await exchange(memory, "我住在北京", T0)
    fresh = await exchange(memory, "请回答简短一点", T0 + timedelta(minutes=5))
    assert await memory.parts.extraction.run_once(T0 + timedelta(minutes=6)) == 1
    [fact] = await memory.parts.keeper.recall_by_type(
        1, None, "facts", now=T0 + timedelta(minutes=6)
    )
    assert set(fact.source_turn_ids) == {t.id for t in old[:2]}  # the fresh exchange waits
    assert await memory.parts.extraction.run_once(T0 + timedelta(minutes=8)) == 1
    [preference] = await memory.parts.keeper.recall_by_type(
        1, None, "preferences", now=T0 + timedelta(minutes=8)
    )
    assert set(preference.source_turn_ids) == {t.id for t in fresh[:2]}


async def test_a_forget_while_the_model_reads_the_turns_leaves_no_distilled_memory(
    memory_factory, distiller
):
    memory = await memory_factory(**llm_settings(distiller, extraction_every_turns=1))
    await exchange(memory, "我住在北京，回答请简短一点", T0)
    extraction = await held_extraction(memory, distiller, T0 + timedelta(minutes=1))
    try:
        forgotten = await memory.parts.forgetting.forget(
            ForgetScope(user_id=1, private_only=True)
        )  # /forget + 确认
        assert forgotten.dialogues == 2
    finally:
        distiller.gate.set()
    await extraction
    assert distiller.server.requests  # the model did answer, and its answer was dropped
    assert await distilled_contents(memory) == []
    assert await memory.parts.extraction.run_once(T0 + timedelta(hours=1)) == 0


async def test_a_recall_while_the_model_reads_the_turns_drops_the_batch_and_the_rest_follow(
    memory_factory, distiller
):
    memory = await memory_factory(**llm_settings(distiller, extraction_every_turns=1))
    await exchange(memory, "我住在北京", T0, message_id=501)
    await exchange(memory, "我在杭州上班", T0 + timedelta(minutes=1), message_id=502)
    extraction = await held_extraction(memory, distiller, T0 + timedelta(minutes=2))
    try:
        recalled = RecalledMessage(self_id=None, message_id=501, user_id=1)  # 撤回
        assert (
            await memory.parts.forgetting.delete_message(recalled)
        ).dialogues == 2  # and the reply
    finally:
        distiller.gate.set()
    await extraction
    assert await distilled_contents(memory) == []

    # The turns left are still due, and read again without the recalled one.
    distiller.gate = None
    assert await memory.parts.extraction.run_once(T0 + timedelta(minutes=3)) == 1
    assert "用户住在北京" not in await distilled_contents(memory)
    facts = await memory.parts.keeper.recall_by_type(1, None, "facts", now=T0 + timedelta(hours=1))
    assert [f.content for f in facts] == ["用户在杭州上班"]


async def test_two_bots_on_one_database_never_distil_the_same_session(memory_factory, distiller):
    settings = llm_settings(distiller, extraction_every_turns=1)
    first, second = await memory_factory(**settings), await memory_factory(**settings)
    for user in range(1, 5):
        await exchange(first, "我住在北京", T0, user_id=user)
    later = T0 + timedelta(minutes=10)
    done = await asyncio.gather(
        first.parts.extraction.run_once(later), second.parts.extraction.run_once(later)
    )
    assert sum(done) == 4
    facts_prompts = [p for p in distiller.server.prompt_texts() if prompt_kind(p) == "facts"]
    assert len(facts_prompts) == 4  # each session asked about once
    for user in range(1, 5):
        [fact] = await first.parts.keeper.recall_by_type(user, None, "facts", now=later)
        assert fact.content == "用户住在北京"
