"""A tool that fails or never finishes answers the model with a tool message, not an error."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from memory_core.conversation.asking import ModelAsking
from memory_core.conversation.budget import BudgetState, GroupBudget
from memory_core.conversation.tools import ChatScope, MemoryTools
from memory_core.distill.memory import ExtractedMemory, SaveOutcome
from memory_core.errors import DatabaseUnavailableError
from memory_core.models import RecallResult
from memory_core.providers.chat_turn import ToolCall
from memory_core.recall.options import DEFAULT_RECALL, RecallOptions
from memory_core.settings import MemorySettings

SCOPE = ChatScope(1, 100, before=datetime(2026, 12, 2, 6, 0, tzinfo=timezone.utc))


class Recall:
    """A recall that fails, fails with an error built from the query (``error_of``), or waits
    for an event nobody sets (a tool that never finishes)."""

    def __init__(
        self, *, fail: bool = False, error_of: Callable[[str], Exception] | None = None
    ) -> None:
        self.fail = fail
        self.error_of = error_of
        self.never = asyncio.Event()
        self.asked: list[RecallOptions] = []

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo("Asia/Shanghai")

    async def recall(
        self,
        user_id: int,
        query: str,
        group_id: int | None = None,
        options: RecallOptions = DEFAULT_RECALL,
    ) -> RecallResult:
        self.asked.append(options)
        if self.error_of is not None:
            raise self.error_of(query)
        if self.fail:
            raise DatabaseUnavailableError("the memory database is not connected")
        await self.never.wait()
        raise AssertionError("never set")


class Notes:
    async def save(
        self,
        items: Sequence[ExtractedMemory],
        user_id: int,
        group_id: int | None = None,
        *,
        source_turn_ids: Sequence[int] = (),
        stated_at: datetime | None = None,
    ) -> SaveOutcome:
        raise DatabaseUnavailableError("the memory database is not connected")


class NobodyOptedOut:
    async def opted_out(self, user_id: int, group_id: int | None) -> bool:
        return False


def tools(recall: Recall, seconds: float = 5.0) -> MemoryTools:
    return MemoryTools(
        recall=recall,
        notes=Notes(),
        opt_outs=NobodyOptedOut(),
        settings=MemorySettings(),
        tool_seconds=seconds,
    )


async def test_a_tool_that_never_finishes_is_cut_off_with_a_message():
    answer = await tools(Recall(), seconds=0.05).run(
        ToolCall("a", "search_memory", '{"query": "猫"}'), SCOPE
    )
    assert "超时" in answer


async def test_a_failing_memory_becomes_a_message():
    answer = await tools(Recall(fail=True)).run(
        ToolCall("a", "search_memory", '{"query": "猫"}'), SCOPE
    )
    assert "不可用" in answer
    answer = await tools(Recall()).run(ToolCall("b", "remember", '{"text": "喜欢猫"}'), SCOPE)
    assert "不可用" in answer


async def test_bad_times_and_types_are_refused_before_any_search():
    recall = Recall(fail=True)
    for arguments in (
        '{"query": "猫", "since": "上周"}',
        '{"query": 3}',
        '["猫"]',
        '{"query": "猫", "since": "2026-12-03"}',  # after the message
        '{"text": "' + "长" * 400 + '"}',
    ):
        name = "remember" if "text" in arguments else "search_memory"
        answer = await tools(recall).run(ToolCall("a", name, arguments), SCOPE)
        assert "参数不对" in answer, arguments
    assert recall.asked == []


async def test_arguments_that_break_something_unexpected_are_still_only_a_message_and_a_line(
    caplog: pytest.LogCaptureFixture,
):
    recall = Recall(fail=True)
    call = ToolCall("a", "search_memory", '{"query": "猫", "until": "9999-12-31"}')
    with caplog.at_level(logging.DEBUG, logger="memory_core.conversation.tools"):
        answer = await tools(recall).run(call, SCOPE)  # the day after 9999-12-31 overflows
    assert answer.startswith("错误")
    [record] = caplog.records
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert record.getMessage() == (
        "tool search_memory failed on the model's arguments: OverflowError"
    )


async def test_an_unexpected_error_s_text_with_the_query_stays_out_of_the_log(
    caplog: pytest.LogCaptureFixture,
):
    call = ToolCall("a", "search_memory", '{"query": "工位密码是多少"}')
    with caplog.at_level(logging.DEBUG, logger="memory_core.conversation.tools"):
        # an unexpected error that repeats the query, as ``int("…")`` would
        echoing = Recall(error_of=lambda query: ValueError(f"cannot read {query!r}"))
        answer = await tools(echoing).run(call, SCOPE)
    assert answer.startswith("错误")
    [record] = caplog.records
    assert "工位密码" not in record.getMessage()
    assert record.getMessage().endswith(": ValueError")


async def test_until_and_since_are_read_on_the_memory_timezone_clock():
    recall = Recall(fail=True)
    call = ToolCall(
        "a", "search_memory", '{"query": "猫", "since": "2026-11-30", "until": "2026-11-30"}'
    )
    await tools(recall).run(call, SCOPE)
    [options] = recall.asked
    assert options.since == datetime(2026, 11, 29, 16, 0, tzinfo=timezone.utc)
    assert options.now == datetime(2026, 11, 30, 16, 0, tzinfo=timezone.utc)
    call = ToolCall("b", "search_memory", '{"query": "猫"}')
    await tools(recall).run(call, SCOPE)
    assert recall.asked[-1].now is not None and recall.asked[-1].now < SCOPE.before


class OffersTools:
    offers_tools = True

    async def complete(self, messages, *, max_tokens=None, temperature=None) -> str:
        raise AssertionError("not asked")

    async def aclose(self) -> None:
        return None

    async def respond(self, messages, *, tools=None, final=False):
        raise AssertionError("not asked")


def test_the_memory_block_shrinks_with_tools_and_near_the_budget():
    settings = MemorySettings(memory_max_tokens=1000, chat_group_daily_tokens=100)
    budget = GroupBudget(settings.chat_group_daily_tokens, ZoneInfo("Asia/Shanghai"))
    recall = Recall()
    with_tools = ModelAsking(OffersTools(), settings, budget, tools(recall))
    without = ModelAsking(OffersTools(), settings, budget, None)
    now = SCOPE.before
    assert (with_tools.memory_tokens_for(7, now), without.memory_tokens_for(7, now)) == (500, None)
    budget.spend(7, 80, now)  # 80 %: tight
    assert with_tools.memory_tokens_for(7, now) == without.memory_tokens_for(7, now) == 250
    assert with_tools.memory_tokens_for(None, now) == 500  # a private chat has no budget
    budget.spend(7, 20, now)
    assert budget.state(7, now) is BudgetState.SPENT
    assert budget.state(7, now + timedelta(days=1)) is BudgetState.OPEN
