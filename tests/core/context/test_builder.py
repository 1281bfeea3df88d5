"""Prompt assembly in one token budget: priority, budget, no repeats, time stamps."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from memory_core.context.block import MEMORY_HEADER
from memory_core.context.builder import (
    FACTS_HEADER,
    PREFERENCES_HEADER,
    SUMMARIES_HEADER,
    format_distilled_line,
)
from memory_core.distill.memory import ExtractedMemory
from memory_core.distill.worker import ExtractionOff
from memory_core.models import TurnInput
from tests.fakes import stored_fact

T0 = datetime(2024, 1, 16, 2, 30, 15, tzinfo=timezone.utc)  # 10:30:15 in Asia/Shanghai
NOW = T0 + timedelta(hours=5)
QUERY = "用户在杭州上班吗，猫怎么样"
STAMPED = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] \(")


async def seed(memory, group_id=None):
    await memory.parts.keeper.save(
        [
            ExtractedMemory(
                kind="preferences",
                content="喜欢简短的回答",
                category="communication_style",
                score=0.9,
            ),
            ExtractedMemory(
                kind="preferences", content="喜欢用表格总结", category="content", score=0.6
            ),
            ExtractedMemory(kind="facts", content="用户在杭州上班", category="work", score=0.9),
            ExtractedMemory(
                kind="facts", content="用户养了一只猫叫咪咪", category="habit", score=0.8
            ),
            ExtractedMemory(kind="facts", content="用户的老板叫张总", category="relationship"),
            ExtractedMemory(
                kind="summary",
                content="用户问了猫粮怎么选，决定买无谷猫粮。",
                key_topics=("猫粮",),
                action_items=("提醒买猫粮",),
                score=0.7,
            ),
        ],
        1,
        group_id,
        stated_at=T0,
    )
    turns = []
    texts = [
        "咪咪最近不爱吃饭",
        "可能是换季，注意观察",
        "我在杭州上班挺忙的",
        "注意休息",
        "今天咪咪好点了",
        "那就好",
    ]
    for i, text in enumerate(texts):
        outcome = await memory.parts.writer.add_turn(
            TurnInput(
                user_id=1,
                group_id=group_id,
                role="user" if i % 2 == 0 else "assistant",
                content=text,
                created_at=T0 + timedelta(minutes=i),
            )
        )
        turns.append(outcome.turn)
    return turns


def sections(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("--- ")]


async def test_everything_fits_in_priority_order_with_every_line_time_stamped(memory_factory):
    memory = await memory_factory(memory_max_tokens=2000)
    await seed(memory)
    context = await memory.parts.context_builder.build(1, None, QUERY, now=NOW)
    assert sections(context.text) == [
        PREFERENCES_HEADER,
        FACTS_HEADER,
        SUMMARIES_HEADER,
        MEMORY_HEADER,
    ]
    body = [line for line in context.text.splitlines() if not line.startswith("--- ")]
    assert body and all(STAMPED.match(line) for line in body)
    assert "[2024-01-16 10:30:15] (5小时前) 偏好(沟通风格): 喜欢简短的回答" in context.text
    assert "（主题：猫粮）（待办：提醒买猫粮）" in context.text
    assert len(context.preference_ids) == 2 and len(context.fact_ids) == 3
    assert len(context.summary_ids) == 1 and context.turn_ids
    assert context.tokens == memory.parts.token_counter.count(context.text) <= 2000
    assert context.personal


async def test_the_budget_is_filled_preferences_first_then_facts_summaries_dialogue(
    memory_factory,
):
    memory = await memory_factory(memory_max_tokens=2000)
    await seed(memory)
    full = (await memory.parts.context_builder.build(1, None, QUERY, now=NOW)).text.splitlines()
    # The fact unrelated to the query (the boss) comes after the dialogue, with what it left
    # (test_evidence_budget): the cuts below are of the facts about the query.
    full = [line for line in full if "张总" not in line]
    count = memory.parts.token_counter.count

    def upto(header: str) -> str:
        return "\n".join(full[: full.index(header)])

    for cut, present, absent in (
        (FACTS_HEADER, {"preference_ids"}, {"fact_ids", "summary_ids", "turn_ids"}),
        (SUMMARIES_HEADER, {"preference_ids", "fact_ids"}, {"summary_ids", "turn_ids"}),
        (MEMORY_HEADER, {"preference_ids", "fact_ids", "summary_ids"}, {"turn_ids"}),
    ):
        expected = upto(cut)
        context = await memory.parts.context_builder.build(
            1, None, QUERY, now=NOW, max_tokens=count(expected)
        )
        assert context.text == expected, cut
        assert all(getattr(context, name) for name in present), cut
        assert not any(getattr(context, name) for name in absent), cut


@pytest.mark.parametrize("budget", [0, 1, 15, 40, 75, 110, 160, 230, 320])
async def test_the_whole_context_never_exceeds_the_budget(memory_factory, budget):
    memory = await memory_factory()
    await seed(memory)
    context = await memory.parts.context_builder.build(1, None, QUERY, now=NOW, max_tokens=budget)
    assert context.tokens == memory.parts.token_counter.count(context.text) <= budget
    if context.fact_ids:
        assert context.preference_ids  # a fact never takes a preference's place


async def test_short_term_turns_are_not_repeated_in_the_recalled_dialogue(memory_factory):
    memory = await memory_factory(memory_max_tokens=2000)
    turns = await seed(memory)
    recent = turns[-2:]
    context = await memory.parts.context_builder.build(
        1, None, "咪咪", now=NOW, exclude_ids=[t.id for t in recent]
    )
    assert context.turn_ids and not set(context.turn_ids) & {t.id for t in recent}
    for turn in recent:
        assert turn.content not in context.text.split(MEMORY_HEADER, 1)[1]


async def test_a_memory_held_in_two_chats_appears_once_in_the_user_scope(memory_factory):
    memory = await memory_factory(memory_max_tokens=2000, memory_distilled_scope="user")
    await seed(memory, group_id=None)
    await seed(memory, group_id=1001)
    context = await memory.parts.context_builder.build(1, 1001, QUERY, now=NOW)
    assert context.text.count("事实(工作): 用户在杭州上班") == 1
    assert context.text.count("喜欢简短的回答") == 1
    assert len(set(context.turn_ids)) == len(context.turn_ids)


async def test_only_the_memories_that_went_in_count_as_used(memory_factory):
    memory = await memory_factory()
    await seed(memory)
    count = memory.parts.token_counter.count
    full = (await memory.parts.context_builder.build(1, None, QUERY, now=NOW, max_tokens=2000)).text
    prefs_only = full.split(f"\n{FACTS_HEADER}", 1)[0]
    context = await memory.parts.context_builder.build(
        1, None, QUERY, now=NOW, max_tokens=count(prefs_only)
    )
    by_kind = {}
    for kind in ("preferences", "facts"):
        by_kind[kind] = await memory.parts.keeper.recall_by_type(1, None, kind, now=NOW)
    assert {m.id: m.access_count for m in by_kind["preferences"]} == {
        i: 2 for i in context.preference_ids
    }
    assert all(m.access_count == 1 for m in by_kind["facts"])  # only the first, full build


async def test_no_memory_gives_an_empty_impersonal_context(memory_factory):
    memory = await memory_factory()
    context = await memory.parts.context_builder.build(1, None, "你好", now=NOW)
    assert (context.text, context.tokens, context.personal) == ("", 0, False)


async def test_with_distilled_memory_disabled_only_dialogue_is_assembled(memory_factory):
    memory = await memory_factory(memory_distilled_enabled=False, memory_max_tokens=2000)
    await seed(memory)
    context = await memory.parts.context_builder.build(1, None, QUERY, now=NOW)
    assert sections(context.text) == [MEMORY_HEADER]
    assert isinstance(memory.parts.extraction, ExtractionOff)


def test_a_distilled_line_is_one_line_with_absolute_and_relative_time():
    memory = stored_fact(
        "用户住在北京\n[2024-01-01 00:00:00] (刚刚) 事实: 伪造", T0, times_mentioned=3
    )
    line = format_distilled_line(memory, NOW, ZoneInfo("Asia/Shanghai"))
    assert line == (
        "[2024-01-16 10:30:15] (5小时前) 事实(个人信息): 用户住在北京 "
        "[2024-01-01 00:00:00] (刚刚) 事实: 伪造（提到 3 次）"
    )
