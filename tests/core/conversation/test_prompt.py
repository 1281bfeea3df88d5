from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from memory_core.context.block import MEMORY_HEADER, LineBudget, MemoryBlock, build_memory_block
from memory_core.conversation.prompt import (
    NOTE_CLOSE,
    NOTE_OPEN,
    ChatPlace,
    build_chat_messages,
    build_moment_note,
    build_system_prompt,
)
from memory_core.lang.timefmt import format_memory_line
from memory_core.lang.tokens import TiktokenCounter, load_token_counter
from memory_core.models import MemoryTurn, RecallWindow, Role

TZ = ZoneInfo("Asia/Shanghai")
NOW = datetime(2024, 1, 16, 16, 0, 0, tzinfo=TZ)


class CharCounter:
    """One token per character: budgets in tests become easy to compute exactly."""

    def count(self, text: str) -> int:
        return len(text)


CHARS = CharCounter()


@pytest.fixture(scope="module")
def tiktoken_counter() -> TiktokenCounter:
    return load_token_counter("cl100k_base")


def make_turn(
    turn_id: int,
    created_at: datetime,
    content: str | None = None,
    *,
    role: Role = "user",
    sender_name: str | None = None,
) -> MemoryTurn:
    return MemoryTurn(
        id=turn_id,
        message_uuid=f"uuid-{turn_id}",
        session_key="123456789",
        self_id=None,
        user_id=123456789,
        group_id=None,
        chat_type="private",
        role=role,
        content=content if content is not None else f"第{turn_id}条消息",
        sender_name=sender_name,
        message_id=None,
        created_at=created_at,
        score=None,
        expires_at=None,
        token_count=0,
    )


def window_of(ids: Sequence[int], anchor_id: int, start: datetime) -> RecallWindow:
    turns = tuple(
        make_turn(i, start + timedelta(minutes=n), role="user" if n % 2 == 0 else "assistant")
        for n, i in enumerate(ids)
    )
    return RecallWindow(anchor_id=anchor_id, score=1.0, similarity=0.9, turns=turns)


def render(turns: Sequence[MemoryTurn]) -> str:
    ordered = sorted(turns, key=lambda t: t.created_at)
    return "\n".join([MEMORY_HEADER, *(format_memory_line(t, NOW, TZ) for t in ordered)])


def turns_by_id(windows: Sequence[RecallWindow]) -> dict[int, MemoryTurn]:
    return {t.id: t for w in windows for t in w.turns}


YESTERDAY = datetime(2024, 1, 15, 10, 0, tzinfo=TZ)
LAST_WEEK = datetime(2024, 1, 8, 10, 0, tzinfo=TZ)


# --- build_memory_block -------------------------------------------------------------------


def test_no_windows_or_zero_budget_gives_an_empty_block() -> None:
    assert build_memory_block([], LineBudget(NOW, TZ, CHARS, 1000)) == MemoryBlock("", (), 0, 0)
    windows = [window_of([1, 2, 3], 2, YESTERDAY)]
    assert build_memory_block(windows, LineBudget(NOW, TZ, CHARS, 0)) == MemoryBlock("", (), 0, 1)


def test_windows_that_fit_are_printed_whole_in_time_order_under_the_header() -> None:
    recent_window = window_of([11, 12, 13], 12, YESTERDAY)
    old_window = window_of([1, 2, 3], 2, LAST_WEEK)
    windows = [recent_window, old_window]  # rank order is not time order
    block = build_memory_block(windows, LineBudget(NOW, TZ, CHARS, 10_000))
    assert block.turn_ids == (1, 2, 3, 11, 12, 13)
    by_id = turns_by_id(windows)
    assert block.text == render([by_id[i] for i in block.turn_ids])
    assert block.text.startswith(MEMORY_HEADER + "\n[2024-01-08 10:00:00] (1周前) user: ")
    assert block.tokens == len(block.text)
    assert block.dropped_windows == 0


def test_window_that_does_not_fit_loses_its_farthest_neighbours_first() -> None:
    window = window_of([1, 2, 3, 4, 5], 3, YESTERDAY)
    by_id = turns_by_id([window])
    budget = len(render([by_id[2], by_id[3], by_id[4]]))
    block = build_memory_block([window], LineBudget(NOW, TZ, CHARS, budget))
    assert block.turn_ids == (2, 3, 4)
    assert block.tokens == budget


def test_on_equal_distance_the_earlier_neighbour_is_dropped_before_the_later_one() -> None:
    window = window_of([1, 2, 3, 4, 5], 3, YESTERDAY)
    by_id = turns_by_id([window])
    budget = len(render([by_id[i] for i in (2, 3, 4, 5)]))
    assert build_memory_block([window], LineBudget(NOW, TZ, CHARS, budget)).turn_ids == (2, 3, 4, 5)
    only_two = len(render([by_id[3], by_id[4]]))
    assert build_memory_block([window], LineBudget(NOW, TZ, CHARS, only_two)).turn_ids == (3, 4)


def test_anchor_at_the_window_edge_keeps_the_turns_next_to_it() -> None:
    window = window_of([1, 2, 3, 4, 5], 1, YESTERDAY)
    by_id = turns_by_id([window])
    budget = len(render([by_id[1], by_id[2]]))
    assert build_memory_block([window], LineBudget(NOW, TZ, CHARS, budget)).turn_ids == (1, 2)


def test_window_whose_anchor_alone_does_not_fit_is_dropped_and_later_windows_still_tried() -> None:
    huge = RecallWindow(
        anchor_id=1,
        score=2.0,
        similarity=0.95,
        turns=(make_turn(1, LAST_WEEK, "很长的消息" * 200),),
    )
    small = window_of([11, 12, 13], 12, YESTERDAY)
    by_id = turns_by_id([small])
    budget = len(render(list(by_id.values())))
    block = build_memory_block([huge, small], LineBudget(NOW, TZ, CHARS, budget))
    assert block.turn_ids == (11, 12, 13)
    assert block.dropped_windows == 1
    assert "很长的消息" not in block.text


def test_first_window_fills_the_budget_before_lower_ranked_windows() -> None:
    best = window_of([11, 12, 13], 12, YESTERDAY)
    second = window_of([1, 2, 3], 2, LAST_WEEK)
    by_id = turns_by_id([best, second])
    budget = len(render([by_id[i] for i in (11, 12, 13, 2)]))
    block = build_memory_block([best, second], LineBudget(NOW, TZ, CHARS, budget))
    assert block.turn_ids == (2, 11, 12, 13)
    assert block.dropped_windows == 0


def test_excluded_turns_are_skipped_and_a_fully_excluded_window_is_not_counted_dropped() -> None:
    shown_elsewhere = window_of([21, 22, 23], 22, NOW - timedelta(minutes=10))
    older = window_of([1, 2, 3], 2, YESTERDAY)
    block = build_memory_block(
        [shown_elsewhere, older], LineBudget(NOW, TZ, CHARS, 10_000, exclude_ids={21, 22, 23, 3})
    )
    assert block.turn_ids == (1, 2)
    assert block.dropped_windows == 0


def test_turns_shared_by_overlapping_windows_appear_once() -> None:
    first = window_of([1, 2, 3], 2, YESTERDAY)
    by_id = turns_by_id([first])
    extra = make_turn(4, YESTERDAY + timedelta(minutes=3))
    second = RecallWindow(anchor_id=3, score=0.5, similarity=0.8, turns=(by_id[2], by_id[3], extra))
    block = build_memory_block([first, second], LineBudget(NOW, TZ, CHARS, 10_000))
    assert block.turn_ids == (1, 2, 3, 4)
    assert block.text.count("第3条消息") == 1


def test_lines_are_never_cut_and_the_budget_is_never_exceeded(
    tiktoken_counter: TiktokenCounter,
) -> None:
    windows = [
        window_of([10 * w + i for i in range(5)], 10 * w + 2, LAST_WEEK + timedelta(hours=w))
        for w in range(1, 6)
    ]
    by_id = turns_by_id(windows)
    whole = {format_memory_line(t, NOW, TZ) for t in by_id.values()}
    for budget in range(0, 400, 7):
        block = build_memory_block(windows, LineBudget(NOW, TZ, tiktoken_counter, budget))
        assert block.tokens <= budget
        assert block.tokens == tiktoken_counter.count(block.text)
        if block.text:
            header, *lines = block.text.split("\n")
            assert header == MEMORY_HEADER
            assert set(lines) <= whole
            assert len(lines) == len(block.turn_ids)


def test_budget_smaller_than_header_plus_one_line_gives_empty_text() -> None:
    windows = [window_of([1, 2, 3], 2, YESTERDAY)]
    block = build_memory_block(windows, LineBudget(NOW, TZ, CHARS, len(MEMORY_HEADER) + 5))
    assert block == MemoryBlock("", (), 0, 1)


def test_multiline_turns_are_kept_whole() -> None:
    turn = make_turn(1, YESTERDAY, "第一行\n第二行")
    window = RecallWindow(anchor_id=1, score=1.0, similarity=0.9, turns=(turn,))
    block = build_memory_block([window], LineBudget(NOW, TZ, CHARS, 10_000))
    assert block.text == f"{MEMORY_HEADER}\n[2024-01-15 10:00:00] (昨天) user: 第一行\n  第二行"


# --- build_system_prompt and build_moment_note ---------------------------------------------
# The layout for a provider's prefix cache moved the time and the recap out of the system prompt
# into the note before the message: the tests below check the same content in its new place.


def test_the_moment_note_states_current_time_zone_and_weekday() -> None:
    note = build_moment_note(NOW.astimezone(timezone.utc), TZ)
    assert "当前时间：2024-01-16 16:00:00" in note
    assert "Asia/Shanghai" in note
    assert "星期二" in note
    assert note.startswith(NOTE_OPEN) and note.endswith(NOTE_CLOSE)


def test_system_prompt_carries_the_time_rules() -> None:
    prompt = build_system_prompt()
    for word in ("过时", "明天", "昨天", "刚才", "下周", "那个", "上次", "它", "时间戳"):
        assert word in prompt, word


def test_system_prompt_is_the_same_at_every_moment_and_for_every_member_of_a_group() -> None:
    def system(user_id: int, name: str) -> str:
        place = ChatPlace(user_id, name, 300, "读书会")
        return build_system_prompt(bot_name="小诗", persona="说话温柔。", place=place)

    assert system(1, "小明") == system(2, "小红")
    assert "小明" not in system(1, "小明") and "当前时间：" not in system(1, "小明")
    note = build_moment_note(NOW, TZ, place=ChatPlace(1, "小明", 300, "读书会"))
    assert "现在对你说话的是群成员小明（QQ 1）。" in note
    assert "对你说话" not in build_moment_note(NOW, TZ, place=ChatPlace(1, "小明"))


@pytest.mark.parametrize(
    "last_turn_at", [None, NOW - timedelta(minutes=30), NOW - timedelta(hours=1)]
)
def test_no_recap_instruction_within_an_hour(last_turn_at: datetime | None) -> None:
    assert "回顾" not in build_moment_note(NOW, TZ, last_turn_at=last_turn_at)


def test_recap_instruction_names_the_gap_when_over_an_hour() -> None:
    note = build_moment_note(NOW, TZ, last_turn_at=datetime(2024, 1, 16, 10, 59, tzinfo=TZ))
    assert "回顾" in note
    assert "5小时前" in note
    assert "2024-01-16 10:59:00" in note
    assert "3天前" in build_moment_note(NOW, TZ, last_turn_at=NOW - timedelta(days=3))


def test_the_memory_block_is_in_the_note_after_the_time() -> None:
    note = build_moment_note(NOW, TZ, memory_block="MEM")
    assert note.index("当前时间") < note.index("MEM") < note.index(NOTE_CLOSE)


def test_bot_name_and_persona_are_included_when_given() -> None:
    prompt = build_system_prompt(bot_name="小诗", persona="  说话温柔，爱用颜文字。 ")
    assert prompt.startswith("你是小诗。\n说话温柔，爱用颜文字。\n回答时注意：")
    assert build_system_prompt().startswith("回答时注意：")


def test_system_prompt_and_note_stay_small(tiktoken_counter: TiktokenCounter) -> None:
    assert tiktoken_counter.count(build_system_prompt()) < 250
    note = build_moment_note(NOW, TZ, last_turn_at=NOW - timedelta(days=2))
    assert tiktoken_counter.count(note) < 250


# --- build_chat_messages ------------------------------------------------------------------


def test_chat_messages_shape_system_recent_then_note_and_current_user_message() -> None:
    recent = [
        make_turn(1, datetime(2024, 1, 16, 15, 50, 0, tzinfo=TZ), "在吗"),
        make_turn(2, datetime(2024, 1, 16, 15, 50, 5, tzinfo=TZ), "在的", role="assistant"),
    ]
    messages = build_chat_messages("SYS", "NOTE", recent, "订单到哪了？", NOW, TZ)
    assert messages == [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "[15:50:00] 在吗"},
        {"role": "assistant", "content": "在的"},
        {"role": "user", "content": "NOTE\n[16:00:00] 订单到哪了？"},
    ]


def test_chat_messages_without_memory_or_recent_turns() -> None:
    assert build_chat_messages("SYS", "", [], "你好", NOW, TZ) == [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": "[16:00:00] 你好"},
    ]


def test_recent_turns_from_another_day_carry_the_full_date() -> None:
    recent = [make_turn(1, datetime(2024, 1, 15, 23, 59, 0, tzinfo=TZ), "晚安")]
    messages = build_chat_messages("SYS", "", recent, "早", NOW, TZ)
    assert messages[1] == {"role": "user", "content": "[2024-01-15 23:59:00] 晚安\n[16:00:00] 早"}


def test_chat_messages_alternate_roles_and_start_with_a_user_message() -> None:
    base = datetime(2024, 1, 16, 15, 0, tzinfo=TZ)
    recent = [
        make_turn(5, base + timedelta(minutes=5), "要发货了吗", role="user"),
        make_turn(1, base, "上一轮的回答", role="assistant"),  # its question fell out
        make_turn(3, base + timedelta(minutes=3), "第二句", role="user"),
        make_turn(2, base + timedelta(minutes=2), "第一句", role="user"),
        make_turn(4, base + timedelta(minutes=4), "好的", role="assistant"),
    ]
    messages = build_chat_messages("SYS", "", recent, "快点", NOW, TZ)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1]["content"] == "[15:02:00] 第一句\n[15:03:00] 第二句"
    assert messages[2]["content"] == "好的"
    assert messages[3]["content"] == "[15:05:00] 要发货了吗\n[16:00:00] 快点"
    assert "上一轮的回答" not in str(messages)
