"""The conversation engine on the embedded PostgreSQL, with a recording stand-in chat model."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from pydantic import SecretStr

from memory_core import open_memory
from memory_core.context.block import MEMORY_HEADER
from memory_core.context.builder import FACTS_HEADER, PREFERENCES_HEADER
from memory_core.conversation.engine import (
    APOLOGY,
    NOT_CONFIGURED_NOTICE,
    SLOW_NOTICE,
    ConversationEngine,
    Delivery,
    Outcome,
    SessionLocks,
    split_reply,
)
from memory_core.conversation.preparation import MAX_INPUT_CHARS
from memory_core.conversation.prompt import NOTE_OPEN
from memory_core.distill.memory import ExtractedMemory
from memory_core.errors import LLMError
from memory_core.models import ForgetScope, TurnInput
from memory_core.providers.embedding import CachedEmbedder
from memory_core.recall.options import RecallOptions
from memory_core.settings import MemorySettings
from tests.fakes import Answer, HashingEmbedder, RecordingModel, ScriptedLLM
from tests.window_gate import gate_the_window

# A private chat numbers its memory lines for the model to cite (conversation.citation).
MEMORY_LINE = re.compile(
    r"^(?:#\d+ )?"
    r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\] \((?:刚刚|\d+(?:分钟|小时|天|周|个月|年)前|昨天)\) "
    r"(?:user|assistant)(?:\([^)]*\))?: ",
    re.MULTILINE,
)


EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)


class Outbox:
    """The ``send`` callback: records what was sent and hands out message ids."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.next_id = 9000
        self.refuse = False

    async def __call__(self, text: str) -> Delivery | None:
        if self.refuse:
            return None
        self.sent.append(text)
        self.next_id += 1
        return Delivery(text=text, message_id=self.next_id)


def user_turn(
    text: str,
    *,
    user: int = 1,
    group: int | None = None,
    message_id: int | None = None,
    at: datetime | None = None,
) -> TurnInput:
    return TurnInput(
        user_id=user,
        group_id=group,
        self_id=10001,
        role="user",
        content=text,
        sender_name="小明",
        message_id=message_id,
        created_at=at,
    )


@pytest.fixture
async def memory(memory_factory):
    return await memory_factory()


def engine_for(memory, model, **kwargs) -> ConversationEngine:
    return ConversationEngine(parts=memory.parts, chat_model=model, bot_name="小诗", **kwargs)


# ---------------------------------------------------------------- the happy path


async def test_reply_is_sent_and_stored_with_its_message_id_after_the_user_turn(memory):
    model, outbox = RecordingModel("你好呀"), Outbox()
    result = await engine_for(memory, model).converse(user_turn("你好", message_id=1), outbox)
    assert result.outcome is Outcome.REPLIED
    assert outbox.sent == ["你好呀"]
    assert result.user_turn is not None and result.reply_turn is not None
    assert result.reply_turn.role == "assistant"
    assert result.reply_turn.message_id == 9001
    assert result.reply_turn.sender_name == "小诗"
    assert result.reply_turn.created_at > result.user_turn.created_at
    stored = await memory.parts.retriever.recent_turns(1, None, limit=10, since=EPOCH)
    assert [(t.role, t.content) for t in stored] == [("user", "你好"), ("assistant", "你好呀")]
    # The finished exchange waits for the evaluator (which is not running in this test).
    assert (await memory.stats()).evaluation.pending == 1


async def test_prompt_has_current_time_and_old_facts_as_seed_format_memory_lines(memory):
    now = datetime.now(timezone.utc)
    await memory.parts.writer.add_turn(
        user_turn("我的猫叫咪咪，三岁了", at=now - timedelta(minutes=45))
    )
    model = RecordingModel()
    await engine_for(memory, model).converse(user_turn("我的猫叫什么名字"), Outbox())
    system = model.prompts[-1][-1]["content"]  # the time and memory come with the message
    local_now = now.astimezone(memory.parts.tz)
    assert f"当前时间：{local_now:%Y-%m-%d %H:}" in system
    assert "Asia/Shanghai" in system
    lines = [line for line in system.splitlines() if MEMORY_LINE.match(line)]
    assert any(
        re.search(r"\((4[5-6])分钟前\) user\(小明\): 我的猫叫咪咪，三岁了$", line) for line in lines
    ), system
    # The current message is the last user message, not a memory line.
    assert not any("我的猫叫什么名字" in line for line in lines)
    assert model.prompts[-1][-1]["content"].endswith("我的猫叫什么名字")


async def test_recent_turns_are_short_term_messages_and_not_repeated_as_memory(memory):
    model, outbox = RecordingModel("记住了"), Outbox()
    engine = engine_for(memory, model)
    await engine.converse(user_turn("我明天要去北京出差"), outbox)
    await engine.converse(user_turn("出差的事你记得吗"), outbox)
    prompt = model.prompts[-1]
    # Short-term memory: the earlier exchange as chat messages.
    assert [m["role"] for m in prompt] == ["system", "user", "assistant", "user"]
    assert prompt[1]["content"].endswith("我明天要去北京出差")
    assert prompt[2]["content"] == "记住了"
    # ...and not a second time inside the recalled memory block (with the current message).
    assert "我明天要去北京出差" not in prompt[-1]["content"]


async def test_recall_never_crosses_sessions(memory):
    now = datetime.now(timezone.utc)
    earlier = now - timedelta(hours=2)
    await memory.parts.writer.add_turn(user_turn("我的暗号是青蛙跳", group=100, at=earlier))
    model = RecordingModel()
    engine = engine_for(memory, model)
    for user, group in ((1, 200), (2, 100), (1, None)):
        await engine.converse(user_turn("我的暗号是什么", user=user, group=group), Outbox())
        assert "青蛙跳" not in model.text(), (user, group)
    await engine.converse(user_turn("我的暗号是什么", user=1, group=100), Outbox())
    assert "青蛙跳" in model.prompts[-1][-1]["content"]


async def test_recap_is_offered_after_more_than_an_hour_of_silence(memory):
    now = datetime.now(timezone.utc)
    await memory.parts.writer.add_turn(user_turn("上次聊到旅行计划", at=now - timedelta(hours=3)))
    model = RecordingModel()
    engine = engine_for(memory, model)
    await engine.converse(user_turn("我回来了"), Outbox())
    assert "上次对话在3小时前" in model.prompts[-1][-1]["content"]
    await engine.converse(user_turn("继续说"), Outbox())
    assert "上次对话在" not in model.text()


async def test_duplicate_message_is_answered_once(memory):
    model, outbox = RecordingModel(), Outbox()
    engine = engine_for(memory, model)
    first = await engine.converse(user_turn("在吗", message_id=77), outbox)
    second = await engine.converse(user_turn("在吗", message_id=77), outbox)
    assert (first.outcome, second.outcome) == (Outcome.REPLIED, Outcome.DUPLICATE)
    assert len(model.prompts) == 1 and len(outbox.sent) == 1


async def test_a_reused_message_id_is_a_new_message_not_a_duplicate(memory):
    model, outbox = RecordingModel(), Outbox()
    engine = engine_for(memory, model)
    long_ago = datetime.now(timezone.utc) - timedelta(days=30)
    first = await engine.converse(user_turn("在吗", message_id=78, at=long_ago), outbox)
    # QQ reused the id: another text, or the same text a month later, is answered and stored.
    other = await engine.converse(user_turn("今天吃什么", message_id=78), outbox)
    again = await engine.converse(user_turn("在吗", message_id=78), outbox)
    assert [r.outcome for r in (first, other, again)] == [Outcome.REPLIED] * 3
    assert len(model.prompts) == 3
    assert (await memory.stats()).total_rows == 6


async def test_blank_message_is_neither_stored_nor_answered(memory):
    model, outbox = RecordingModel(), Outbox()
    result = await engine_for(memory, model).converse(user_turn("  \n "), outbox)
    assert result.outcome is Outcome.EMPTY
    assert model.prompts == [] and outbox.sent == []


# ---------------------------------------------------------------- failures


async def test_model_failure_sends_apology_and_keeps_the_user_turn(memory):
    model, outbox = RecordingModel(), Outbox()
    model.fail = LLMError("HTTP 500")
    result = await engine_for(memory, model).converse(user_turn("帮我记一下：周五交报告"), outbox)
    assert result.outcome is Outcome.APOLOGIZED
    assert outbox.sent == [APOLOGY]
    stored = await memory.parts.retriever.recent_turns(1, None, limit=10, since=EPOCH)
    assert [(t.role, t.content) for t in stored] == [("user", "帮我记一下：周五交报告")]
    assert (await memory.stats()).evaluation.pending == 0


async def test_a_message_answered_with_the_apology_gets_its_rule_of_thumb_expiry(memory):
    model, outbox = RecordingModel(), Outbox()
    model.fail = LLMError("HTTP 500")
    engine = engine_for(memory, model)
    await engine.converse(user_turn("你好"), outbox)  # a greeting: not kept
    await engine.converse(user_turn("我的生日是5月3日"), outbox)  # about the user: a week
    async with memory.parts.database.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT score, expires_at - created_at AS kept FROM dialogues ORDER BY id"
        )
    assert [(r["score"], r["kept"]) for r in rows] == [(15, timedelta(0)), (70, timedelta(days=7))]


async def test_model_timeout_sends_apology(memory):
    model, outbox = RecordingModel(), Outbox()
    model.fail = asyncio.TimeoutError()
    result = await engine_for(memory, model).converse(user_turn("你好"), outbox)
    assert result.outcome is Outcome.APOLOGIZED and outbox.sent == [APOLOGY]


async def test_without_model_notice_is_rate_limited_per_chat_and_turns_are_recorded(memory):
    clock = [1000.0]
    engine = engine_for(memory, None, monotonic=lambda: clock[0])
    outbox = Outbox()
    first = await engine.converse(user_turn("你好"), outbox)
    second = await engine.converse(user_turn("在吗"), outbox)
    other = await engine.converse(user_turn("你好", user=2), outbox)
    in_group = await engine.converse(user_turn("大家好", user=3, group=70), outbox)
    same_group = await engine.converse(user_turn("我也在", user=4, group=70), outbox)
    # A minute later (the default interval, not ten), the chat hears it again.
    assert memory.parts.settings.chat_notice_interval == 60
    clock[0] += 61
    later = await engine.converse(user_turn("还在吗"), outbox)
    assert [r.outcome for r in (first, second, other, in_group, same_group, later)] == [
        Outcome.NOT_CONFIGURED,
        Outcome.QUIET,
        Outcome.NOT_CONFIGURED,
        Outcome.NOT_CONFIGURED,
        Outcome.QUIET,
        Outcome.NOT_CONFIGURED,
    ]
    assert outbox.sent == [NOT_CONFIGURED_NOTICE] * 4
    stored = await memory.parts.retriever.recent_turns(1, None, limit=10, since=EPOCH)
    assert [t.content for t in stored] == ["你好", "在吗", "还在吗"]


async def test_a_slow_model_gets_one_short_wait_message_before_the_answer(memory_factory):
    memory = await memory_factory(chat_slow_notice_after=0.05)
    model, outbox = RecordingModel("想好了"), Outbox()
    model.gate = asyncio.Event()
    engine = engine_for(memory, model)
    talk = asyncio.create_task(engine.converse(user_turn("一个难题"), outbox))
    for _ in range(6000):  # bounded wait (60 s) for the notice, not a timing check
        if outbox.sent:
            break
        await asyncio.sleep(0.01)
    assert outbox.sent == [SLOW_NOTICE]
    model.gate.set()
    result = await talk
    assert result.outcome is Outcome.REPLIED and outbox.sent == [SLOW_NOTICE, "想好了"]
    # Only the answer is stored as the bot's turn.
    stored = await memory.parts.retriever.recent_turns(1, None, limit=10, since=EPOCH)
    assert [t.content for t in stored] == ["一个难题", "想好了"]


async def test_a_quick_model_sends_no_wait_message(memory_factory):
    quick = await memory_factory(chat_slow_notice_after=5)
    outbox = Outbox()
    await engine_for(quick, RecordingModel("马上")).converse(user_turn("简单问题"), outbox)
    assert outbox.sent == ["马上"]


def test_the_slow_notice_is_on_by_default_after_8_seconds():
    assert MemorySettings().chat_slow_notice_after == 8


async def test_two_messages_in_the_same_second_are_both_in_the_next_prompts_context(memory):
    model, outbox = RecordingModel("嗯嗯"), Outbox()
    engine = engine_for(memory, model)
    # QQ stamps messages to the second: both arrive with the same time.
    second = datetime.now(timezone.utc).replace(microsecond=0)
    await engine.converse(user_turn("第一句", message_id=1, at=second), outbox)
    await engine.converse(user_turn("第二句", message_id=2, at=second), outbox)
    assert "第一句" in model.text(-1)
    await engine.converse(user_turn("第三句", message_id=3), outbox)
    history = [(m["role"], m["content"][-3:]) for m in model.prompts[-1][1:]]
    assert history == [
        ("user", "第一句"),
        ("assistant", "嗯嗯"),
        ("user", "第二句"),
        ("assistant", "嗯嗯"),
        ("user", "第三句"),
    ]


async def test_a_turn_leaving_the_short_term_window_while_the_message_is_read_stays_out(memory):
    # The session's tail is read (one round trip) before the prompt is built; a turn that
    # falls out of CHAT_RECENT_MINUTES in between must not reach the short-term messages.
    start = datetime.now(timezone.utc).replace(microsecond=0)
    ticks = iter(range(1000))

    def clock() -> datetime:  # one second later at every reading
        return start + timedelta(seconds=next(ticks))

    window = timedelta(minutes=memory.parts.settings.chat_recent_minutes)
    await memory.parts.writer.add_turn(
        user_turn("快要过期的一句", at=start - window + timedelta(seconds=1.5))
    )
    model = RecordingModel()
    await engine_for(memory, model, clock=clock).converse(user_turn("新的一句"), Outbox())
    assert [m["role"] for m in model.prompts[-1]] == ["system", "user"]
    # (the memory block before the message may recall it: it is no longer short-term)
    short_term = model.prompts[-1][1]["content"].split(NOTE_OPEN)[0]
    assert "快要过期的一句" not in short_term


async def test_undelivered_reply_is_not_stored(memory):
    model, outbox = RecordingModel("回复"), Outbox()
    outbox.refuse = True
    result = await engine_for(memory, model).converse(user_turn("你好"), outbox)
    assert result.outcome is Outcome.UNSENT
    stored = await memory.parts.retriever.recent_turns(1, None, limit=10, since=EPOCH)
    assert [t.role for t in stored] == ["user"]


async def test_database_down_answers_without_memory_and_spools_the_turns():
    import tempfile

    with tempfile.TemporaryDirectory(prefix="tm-chat-down-") as data_dir:
        settings = MemorySettings(
            memory_dsn=SecretStr("postgresql://nobody@127.0.0.1:9/none?connect_timeout=2"),
            memory_data_dir=Path(data_dir),
        )
        memory = await open_memory(
            settings, embedder=HashingEmbedder(), require_database=False, maintenance_interval=None
        )
        try:
            model, outbox = RecordingModel("没问题"), Outbox()
            result = await engine_for(memory, model).converse(user_turn("数据库挂了吗"), outbox)
            assert result.outcome is Outcome.REPLIED
            assert result.spooled and not result.memory_available
            assert outbox.sent == ["没问题"]
            assert "当前时间" in model.prompts[-1][-1]["content"]
            spool = (Path(data_dir) / "spool.jsonl").read_text(encoding="utf-8")
            assert "数据库挂了吗" in spool and "没问题" in spool
        finally:
            await memory.aclose()


# ---------------------------------------------------------------- ordering and concurrency


async def test_one_session_is_served_in_order_while_other_sessions_proceed(memory):
    model = RecordingModel()
    model.gate = asyncio.Event()
    engine = engine_for(memory, model)
    first = asyncio.create_task(engine.converse(user_turn("第一条"), Outbox()))
    await asyncio.wait_for(model.started.wait(), 10)
    second = asyncio.create_task(engine.converse(user_turn("第二条"), Outbox()))
    await asyncio.sleep(0.2)
    # Session 1 is held by the first message; the second waits without reaching the model.
    assert len(model.prompts) == 1
    # Another session gets through while session 1 is busy... up to the (gated) model.
    other = asyncio.create_task(engine.converse(user_turn("别的会话", user=2), Outbox()))
    for _ in range(1200):  # bounded wait (60 s) for the other session, not a timing check
        if len(model.prompts) == 2:
            break
        await asyncio.sleep(0.05)
    assert model.prompts[-1][-1]["content"].endswith("别的会话")
    model.gate.set()
    await asyncio.wait_for(asyncio.gather(first, second, other), 20)
    assert model.prompts[-1][-1]["content"].endswith("第二条")
    assert engine.active_sessions == 0


async def test_session_locks_are_dropped_when_idle_and_keep_arrival_order():
    locks = SessionLocks()
    order: list[int] = []

    async def worker(i: int) -> None:
        async with locks.hold("s"):
            await asyncio.sleep(0.01 * (5 - i))
            order.append(i)

    await asyncio.gather(*(worker(i) for i in range(5)))
    assert order == [0, 1, 2, 3, 4]
    assert len(locks) == 0


# ---------------------------------------------------------------- splitting


def test_split_reply_prefers_newlines_then_sentence_ends():
    text = "第一段第一句。第一段第二句。\n第二段很长很长很长。第二段第二句！"
    pieces = split_reply(text, 20)
    assert pieces == ["第一段第一句。第一段第二句。", "第二段很长很长很长。第二段第二句！"]


def test_split_reply_pieces_fit_and_lose_nothing_but_boundary_whitespace():
    text = ("这是一句话，" * 50 + "\n") * 3 + "x" * 700
    for limit in (50, 100, 333):
        pieces = split_reply(text, limit)
        assert all(0 < len(p) <= limit for p in pieces)
        assert "".join("".join(p.split()) for p in pieces) == "".join(text.split())


def test_split_reply_short_text_is_one_piece_and_blank_is_none():
    assert split_reply("  你好  ", 10) == ["你好"]
    assert split_reply("   ", 10) == []


def test_split_reply_keeps_emoji_whole():
    text = "a" + "😀" * 10
    assert "".join(split_reply(text, 4)) == text


# ---------------------------------------------------------------- bad input


async def test_huge_message_is_stored_whole_but_cut_visibly_in_the_prompt(memory):
    model = RecordingModel()
    huge = "长" * 50_000
    result = await engine_for(memory, model).converse(user_turn(huge), Outbox())
    assert result.user_turn is not None and result.user_turn.content == huge
    current = model.prompts[-1][-1]["content"]
    limit = MAX_INPUT_CHARS
    assert current.endswith(f"…[消息过长，其余 {50_000 - limit} 字略去]")
    assert len(current) < limit + 100


async def test_nul_bytes_and_broken_surrogates_reach_neither_store_nor_model_raw(memory):
    model = RecordingModel()
    result = await engine_for(memory, model).converse(user_turn("a\x00b \ud83d c"), Outbox())
    assert result.outcome is Outcome.REPLIED
    assert result.user_turn is not None and result.user_turn.content == "ab \ufffd c"
    assert model.prompts[-1][-1]["content"].endswith("ab \ufffd c")


async def test_holding_a_session_delays_its_messages_but_not_others(memory):
    model = RecordingModel()
    engine = engine_for(memory, model)
    async with engine.session(1, None):
        held = asyncio.create_task(engine.converse(user_turn("等一下"), Outbox()))
        await engine.converse(user_turn("别的会话", user=2), Outbox())
        await asyncio.sleep(0.2)
        assert [p[-1]["content"][-4:] for p in model.prompts] == ["别的会话"]
    await asyncio.wait_for(held, 10)
    assert model.prompts[-1][-1]["content"].endswith("等一下")


# ---------------------------------------------------------------- distilled memory and the cache


def distill(messages: list[dict[str, str]]) -> Answer:
    """The extraction model: a fact and a preference from what the user said, nothing else."""
    prompt = messages[-1]["content"]
    said = prompt.split("对话（每行开头是说话时间）：", 1)[-1]
    if "关键事实" in prompt and "我在杭州当咖啡师" in said:
        return Answer('[{"fact": "用户是杭州的一名咖啡师", "category": "work", "confidence": 0.9}]')
    if "偏好和习惯" in prompt and "简短" in said:
        return Answer('[{"preference": "喜欢简短的回答", "category": "communication_style"}]')
    return Answer("无")


@pytest.fixture
def extraction_llm():
    server = ScriptedLLM(distill)
    yield server
    server.close()


def preload(tmp_path: Path, *pairs: tuple[str, str]) -> Path:
    """The operator's config folder holding a preload file of ``pairs``."""
    path = tmp_path / "answer_cache_preload.jsonl"
    lines = [json.dumps({"question": q, "answer": a}, ensure_ascii=False) for q, a in pairs]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return tmp_path


PUBLIC_QUESTION, PUBLIC_ANSWER = "HTTP 404 是什么意思", "404 表示服务器找不到请求的资源。"
GENERAL_QUESTION = "Docker 和虚拟机有什么区别"


@pytest.fixture
async def cached_memory(memory_factory, tmp_path):
    return await memory_factory(
        answer_cache_enabled=True,
        memory_config_dir=preload(tmp_path, (PUBLIC_QUESTION, PUBLIC_ANSWER)),
    )


async def test_distilled_preference_and_fact_come_before_dialogue_and_stay_in_their_session(
    memory_factory, extraction_llm
):
    memory = await memory_factory(
        extraction_base_url=extraction_llm.base_url,
        extraction_model="distiller",
        extraction_every_turns=1,
    )
    model = RecordingModel("好的")
    engine = engine_for(memory, model)
    told_at = datetime.now(timezone.utc) - timedelta(hours=2)  # beyond short-term memory
    await engine.converse(
        user_turn("我在杭州当咖啡师，回答请简短一点", group=100, at=told_at), Outbox()
    )
    # Extraction never runs on the reply path: the exchange was only counted, and is now due.
    assert extraction_llm.requests == []
    assert await memory.parts.extraction.run_once() == 1

    await engine.converse(user_turn("推荐一款适合手冲的咖啡豆", group=100), Outbox())
    system = model.prompts[-1][-1]["content"]
    preference = system.index(f"{PREFERENCES_HEADER}\n")
    fact = system.index(f"{FACTS_HEADER}\n")
    dialogue = system.index(f"{MEMORY_HEADER}\n")
    assert preference < fact < dialogue, system
    assert re.search(r"\) 偏好\(沟通风格\): 喜欢简短的回答$", system[preference:fact], re.M)
    assert re.search(r"\) 事实\(工作\): 用户是杭州的一名咖啡师$", system[fact:dialogue], re.M)
    assert "user(小明): 我在杭州当咖啡师，回答请简短一点" in system[dialogue:]

    # The same person in another group: nothing of what was distilled in group 100.
    await engine.converse(user_turn("推荐一款适合手冲的咖啡豆", group=200), Outbox())
    other = model.text()
    assert "咖啡师" not in other and "简短" not in other
    assert FACTS_HEADER not in other and PREFERENCES_HEADER not in other


async def test_cache_serves_a_repeated_general_question_without_the_model(cached_memory):
    model, outbox = RecordingModel("容器共享宿主机内核，虚拟机各有完整系统。"), Outbox()
    engine = engine_for(cached_memory, model)
    first = await engine.converse(user_turn(GENERAL_QUESTION, user=11), outbox)
    again = await engine.converse(user_turn(GENERAL_QUESTION + "？", user=11), outbox)
    public = await engine.converse(user_turn(PUBLIC_QUESTION, user=12, group=300), outbox)
    assert len(model.prompts) == 1  # only the first question reached the model
    assert (first.from_cache, again.from_cache, public.from_cache) == (False, True, True)
    assert outbox.sent == [model.answer, model.answer, PUBLIC_ANSWER]
    # A cached reply is stored like any other, and the exchange still goes to the evaluator.
    assert again.outcome is Outcome.REPLIED and again.reply_turn is not None
    stored = await cached_memory.parts.retriever.recent_turns(11, None, limit=10, since=EPOCH)
    assert [t.content for t in stored][-2:] == [GENERAL_QUESTION + "？", model.answer]
    assert (await cached_memory.stats()).evaluation.pending == 3
    lines = (await cached_memory.distilled_stats()).lines_zh()
    assert any("用户精确 1，公共精确 1" in line for line in lines), lines


@pytest.mark.parametrize("question", ["今天星期几", "现在几点了", "我的猫叫什么名字"])
async def test_cache_never_serves_a_time_dependent_or_first_person_question(
    cached_memory, question
):
    model = RecordingModel("答案")
    engine = engine_for(cached_memory, model)
    for _ in range(2):
        result = await engine.converse(user_turn(question, user=13), Outbox())
        assert not result.from_cache
    assert len(model.prompts) == 2


async def test_cache_never_serves_someone_the_bot_knows_facts_about_in_this_chat(cached_memory):
    await cached_memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content="用户在做一个网站项目", category="work")],
        14,
        400,
        stated_at=datetime.now(timezone.utc),
    )
    model = RecordingModel("答案")
    engine = engine_for(cached_memory, model)
    known = await engine.converse(user_turn(PUBLIC_QUESTION, user=14, group=400), Outbox())
    elsewhere = await engine.converse(user_turn(PUBLIC_QUESTION, user=14, group=500), Outbox())
    assert not known.from_cache and len(model.prompts) == 1
    assert "用户在做一个网站项目" in model.prompts[0][-1]["content"]
    assert elsewhere.from_cache  # no facts about them in group 500: the public answer serves


async def test_an_answer_given_with_memory_in_the_prompt_is_never_cached(cached_memory):
    model = RecordingModel("你在看三体的话，可以试试《球状闪电》。")
    engine = engine_for(cached_memory, model)
    await engine.converse(user_turn("我最近在看三体", user=15), Outbox())
    shaped = await engine.converse(user_turn("推荐一本书", user=15), Outbox())
    assert not shaped.from_cache
    assert (await cached_memory.parts.answer_cache.entry_counts()).get("user", 0) == 0
    # So it is served neither in this chat nor, above all, in a group, where it would tell
    # what was said in private.
    for group in (None, 600):
        result = await engine.converse(user_turn("推荐一本书", user=15, group=group), Outbox())
        assert not result.from_cache
    assert len(model.prompts) == 4


async def test_an_answer_cached_in_private_is_never_served_in_the_same_persons_groups(
    cached_memory,
):
    # The first private message: no memory in the prompt, so its answer is cached, yet the
    # question and the answer carry what was said in private.
    secret = "张伟的手机号13812345678怎么校验格式"
    model = RecordingModel("13812345678 是 11 位、以 1 开头的号码，格式正确。")
    engine = engine_for(cached_memory, model)
    first = await engine.converse(user_turn(secret, user=18), Outbox())
    assert not first.from_cache
    assert (await cached_memory.parts.answer_cache.entry_counts()).get("user") == 1

    for group in (700, 800):
        asked = await engine.converse(user_turn(secret, user=18, group=group), Outbox())
        assert not asked.from_cache
    assert len(model.prompts) == 3  # both groups asked the model
    again = await engine.converse(user_turn(secret, user=18), Outbox())
    assert again.from_cache and len(model.prompts) == 3  # still served in private


async def test_forget_removes_distilled_memories_and_cached_answers(cached_memory):
    model = RecordingModel("容器共享宿主机内核。")
    engine = engine_for(cached_memory, model)
    await engine.converse(user_turn(GENERAL_QUESTION, user=16), Outbox())
    await cached_memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content="用户养了一只橘猫", category="habit")],
        16,
        None,
        stated_at=datetime.now(timezone.utc),
    )
    await cached_memory.parts.forgetting.forget(ForgetScope(user_id=16, private_only=True))

    after = await engine.converse(user_turn(GENERAL_QUESTION, user=16), Outbox())
    assert not after.from_cache and len(model.prompts) == 2
    assert "橘猫" not in model.text()


async def test_cache_lookup_failure_falls_back_to_the_model(cached_memory):
    model = RecordingModel("答案")
    engine = engine_for(cached_memory, model)
    await engine.converse(user_turn(GENERAL_QUESTION, user=17), Outbox())
    cached_memory.parts.embedder.fail = True  # the embedding is needed for a semantic lookup
    result = await engine.converse(user_turn(GENERAL_QUESTION + "呢", user=17), Outbox())
    assert result.outcome is Outcome.REPLIED and not result.from_cache
    assert len(model.prompts) == 2


async def test_answering_a_message_with_a_time_word_embeds_its_query_once(memory_factory):
    class CountingQueries(HashingEmbedder):
        def __init__(self) -> None:
            super().__init__()
            self.queries: list[str] = []

        async def embed_query(self, text: str) -> np.ndarray:
            self.queries.append(text)
            return await super().embed_query(text)

    inner = CountingQueries()
    memory = await memory_factory(embedder=CachedEmbedder(inner, 100))
    await memory.parts.keeper.save([ExtractedMemory(kind="facts", content="用户喜欢在雨天看书")], 1)
    model = RecordingModel("那就在家看书吧")
    await engine_for(memory, model).converse(user_turn("今天下雨了，做点什么好"), Outbox())
    # Dialogue and facts were both searched with the query less its time word, embedded once.
    assert inner.queries == ["下雨了,做点什么好"]
    assert "用户喜欢在雨天看书" in model.text()


class HeldPassages(HashingEmbedder):
    """Embeds queries at once and passages only once ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        await self.release.wait()
        return await super().embed_passages(texts)


async def test_both_turns_of_an_exchange_are_stored_at_once_and_embedded_together_after(
    memory_factory, monkeypatch
):
    embedder = HeldPassages()
    # The window lasts until opened below, however long the exchange takes: both turns are
    # in it; the held embedder (not a timer) keeps their vectors away until released.
    window = gate_the_window(monkeypatch)
    memory = await memory_factory(embedder=embedder, embedding_defer_window=0.5)
    model, outbox = RecordingModel("记住了，周三去图书馆"), Outbox()
    result = await engine_for(memory, model).converse(
        user_turn("我周三要去图书馆还书", message_id=1), outbox
    )
    assert result.outcome is Outcome.REPLIED and outbox.sent == ["记住了，周三去图书馆"]
    # The reply was asked for with only the query embedded; both turns wait for their vectors.
    assert (await memory.stats()).store.pending_embeddings == 2
    calls_before = embedder.calls
    assert len(window.waits) == 1  # one window for the user turn and the reply
    window.open()
    embedder.release.set()
    await memory.parts.writer.settle_embeddings()
    assert (await memory.stats()).store.pending_embeddings == 0
    assert embedder.calls == calls_before + 1  # one call for the user turn and the reply
    recalled = await memory.parts.retriever.recall(
        1, "图书馆还书", options=RecallOptions(mode="vector", now=datetime.now(timezone.utc))
    )
    assert {t.content for t in recalled.turns} == {"我周三要去图书馆还书", "记住了，周三去图书馆"}


# ---------------------------------------------------------------- after the reply


class HeldEvaluations:
    """The evaluation queue with every ``enqueue`` held until ``gate`` opens; records when
    each one got through."""

    def __init__(self, inner, log: list[str]) -> None:
        self._inner = inner
        self._log = log
        self.gate = asyncio.Event()
        self.held = 0
        self.one_held = asyncio.Event()
        self.two_held = asyncio.Event()

    async def enqueue(self, user_turn_id: int, assistant_turn_id: int) -> None:
        self.held += 1
        self.one_held.set()
        if self.held >= 2:
            self.two_held.set()
        await self.gate.wait()
        await self._inner.enqueue(user_turn_id, assistant_turn_id)
        self._log.append("queued")

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


class CountingOutbox(Outbox):
    def __init__(self, expected: int) -> None:
        super().__init__()
        self.all_sent = asyncio.Event()
        self._expected = expected

    async def __call__(self, text: str) -> Delivery | None:
        delivery = await super().__call__(text)
        if len(self.sent) >= self._expected:
            self.all_sent.set()
        return delivery


async def test_the_next_message_goes_on_while_an_exchange_is_queued_but_a_command_waits(memory):
    log: list[str] = []
    evaluations = HeldEvaluations(memory.parts.evaluations, log)
    parts = dataclasses.replace(memory.parts, evaluations=evaluations)
    engine = ConversationEngine(parts=parts, chat_model=RecordingModel("好的"), bot_name="小诗")
    outbox = CountingOutbox(expected=2)
    first = asyncio.ensure_future(engine.converse(user_turn("第一句", message_id=1), outbox))
    await asyncio.wait_for(evaluations.one_held.wait(), 60)  # a bound, not a timing
    # The first exchange is stored and waits to be queued: the session's next message is
    # answered meanwhile.
    second = asyncio.ensure_future(engine.converse(user_turn("第二句", message_id=2), outbox))
    await asyncio.wait_for(outbox.all_sent.wait(), 60)
    assert outbox.sent == ["好的", "好的"]
    await asyncio.wait_for(evaluations.two_held.wait(), 60)  # the second reply is stored too
    stored = await memory.parts.retriever.recent_turns(1, None, limit=10, since=EPOCH)
    assert [t.content for t in stored] == ["第一句", "好的", "第二句", "好的"]

    async def command() -> None:
        async with engine.session(1, None):  # a /forget of this session, say
            log.append("command")

    held = asyncio.ensure_future(command())
    for _ in range(5):
        await asyncio.sleep(0)
    assert log == [] and not held.done()  # the exchanges are not queued yet
    evaluations.gate.set()
    await asyncio.wait_for(asyncio.gather(first, second, held), 60)

    assert log == ["queued", "queued", "command"]
    assert evaluations.held == 2
    assert (await memory.stats()).evaluation.pending == 2
