"""A turn is found by the time it talks about, not only by the time it was said."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from memory_core.models import TurnInput
from memory_core.recall.options import RecallOptions

SH = timezone(timedelta(hours=8))
# Tuesday 2024-01-16 08:00 in Shanghai.
TUESDAY = datetime(2024, 1, 16, 8, 0, tzinfo=SH)
MONDAY_EVENING = datetime(2024, 1, 15, 20, 0, tzinfo=SH)


def said(text: str, at: datetime, user: int = 1, group: int | None = None) -> TurnInput:
    return TurnInput(user_id=user, group_id=group, role="user", content=text, created_at=at)


async def test_todays_plan_said_yesterday_is_found_by_a_question_about_today(memory_factory):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues(
        [
            said("今天加班到好晚，累死了", MONDAY_EVENING - timedelta(hours=2)),
            said("我明天上午十点要去体检", MONDAY_EVENING),
            said("晚饭吃的饺子", MONDAY_EVENING + timedelta(minutes=30)),
            said("下周三要交季度报告", MONDAY_EVENING + timedelta(hours=1)),
            # Another session's plan for the same morning is not this user's.
            said("我明天上午要去银行", MONDAY_EVENING, user=2),
        ]
    )

    result = await memory.parts.retriever.recall(
        1, "我今天上午要干嘛", options=RecallOptions(top_n=1, window_size=0, now=TUESDAY)
    )

    assert [t.content for t in result.turns] == ["我明天上午十点要去体检"]


async def test_a_question_about_a_day_finds_the_plans_made_for_it_days_before(
    memory_factory,
):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues(
        [
            said("我明天上午十点要去体检", MONDAY_EVENING),
            said("下周三要交季度报告", MONDAY_EVENING + timedelta(hours=1)),
            said("今天的晚饭是饺子", MONDAY_EVENING + timedelta(minutes=30)),
        ]
    )
    # Wednesday of the next week: the report was planned for today, nine days ago.
    next_wednesday = datetime(2024, 1, 24, 9, 0, tzinfo=SH)

    result = await memory.parts.retriever.recall(
        1, "今天要干嘛", options=RecallOptions(top_n=1, window_size=0, now=next_wednesday)
    )

    assert [t.content for t in result.turns] == ["下周三要交季度报告"]


async def test_turns_stored_without_a_time_reference_still_fall_back_to_any_time(
    memory_factory,
):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues(
        [said("周末去爬山了", MONDAY_EVENING - timedelta(days=2))]
    )

    result = await memory.parts.retriever.recall(
        1, "我今天上午要干嘛", options=RecallOptions(top_n=1, window_size=0, now=TUESDAY)
    )

    assert [t.content for t in result.turns] == ["周末去爬山了"]
