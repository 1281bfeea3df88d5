"""Bad input gives a clear error or is stored safely; nothing already stored is lost."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import asyncpg
import pytest

from memory_core.errors import InvalidTurnError
from memory_core.models import TurnInput

NOW = datetime(2024, 1, 17, tzinfo=timezone.utc)
T0 = datetime(2024, 1, 16, 10, 0, tzinfo=timezone.utc)


def user_turn(content: object, **extra: object) -> TurnInput:
    values: dict = {"user_id": 1, "role": "user", "content": content, "created_at": T0}
    values.update(extra)
    return TurnInput(**values)


@pytest.mark.parametrize(
    "content",
    ["", "   \n\t ", "\x00\x00", None, 123],
    ids=["empty", "whitespace", "only-nul", "none", "number"],
)
async def test_unstorable_content_is_refused_with_a_clear_error(memory_factory, content):
    memory = await memory_factory()
    await memory.parts.writer.add_turn(user_turn("先存一条"))
    with pytest.raises(InvalidTurnError):
        await memory.parts.writer.add_turn(user_turn(content))
    assert (await memory.stats()).total_rows == 1  # the earlier row is still there


@pytest.mark.parametrize(
    "field,value",
    [
        ("role", "system"),
        ("user_id", "abc"),
        ("user_id", 2**64),
        ("group_id", True),
        ("created_at", datetime(2024, 1, 1)),
    ],
    ids=["role", "user-id-text", "user-id-too-big", "group-id-bool", "naive-time"],
)
async def test_bad_metadata_is_refused_with_a_clear_error(memory_factory, field, value):
    memory = await memory_factory()
    with pytest.raises(InvalidTurnError):
        await memory.parts.writer.add_turn(user_turn("内容", **{field: value}))


@pytest.mark.parametrize(
    "content,stored",
    [
        ("a\x00b", "ab"),
        ("表情 😀👍🏽 家庭👨‍👩‍👧", "表情 😀👍🏽 家庭👨‍👩‍👧"),
        ("半个代理 \ud83d 结束", "半个代理 \ufffd 结束"),
        (
            "[CQ:at,qq=10001] [CQ:image,file=x.jpg] 你好",
            "[CQ:at,qq=10001] [CQ:image,file=x.jpg] 你好",
        ),
        ("'; DROP TABLE dialogues; --", "'; DROP TABLE dialogues; --"),
    ],
    ids=["nul", "emoji", "unpaired-surrogate", "cq-code-text", "sql-text"],
)
async def test_odd_text_is_stored_safely_and_recalled(memory_factory, content, stored):
    memory = await memory_factory()
    outcome = await memory.parts.writer.add_turn(user_turn(content))
    assert outcome.turn is not None and outcome.turn.content == stored
    recalled = await memory.parts.retriever.get_contextual_memory(1, content, now=NOW)
    assert [t.content for t in recalled] == [stored]


async def test_100kb_text_is_stored_whole_and_longer_text_is_cut_with_a_visible_mark(
    memory_factory,
):
    memory = await memory_factory(memory_max_content_chars=120_000)
    big = "长" * 100_000
    outcome = await memory.parts.writer.add_turn(user_turn(big))
    assert outcome.turn is not None and outcome.turn.content == big
    small_limit = await memory_factory(memory_max_content_chars=1000)
    cut = await small_limit.parts.writer.add_turn(
        user_turn("字" * 5000, created_at=T0 + timedelta(seconds=1))
    )
    assert cut.turn is not None
    assert cut.turn.content.startswith("字" * 1000)
    assert "已截断 4000 字" in cut.turn.content


async def test_a_bad_turn_in_a_batch_writes_nothing_of_that_batch(memory_factory):
    memory = await memory_factory()
    await memory.parts.writer.add_turn(user_turn("已有的记忆"))
    with pytest.raises(InvalidTurnError):
        await memory.parts.writer.add_dialogues([user_turn("好的一条"), user_turn("  ")])
    assert (await memory.stats()).total_rows == 1


async def test_huge_raw_segments_and_nul_in_segments_are_stored(memory_factory):
    memory = await memory_factory()
    segments = [{"type": "text", "data": {"text": "a\x00b"}}, {"type": "image", "data": {}}]
    outcome = await memory.parts.writer.add_turn(user_turn("带原始消息段", raw_segments=segments))
    assert outcome.turn is not None


async def test_segments_nested_thousands_deep_are_stored_with_the_depth_cut(
    memory_factory, fresh_dsn
):
    from memory_core.lang.text import JSON_DEPTH_LIMIT, JSON_TOO_DEEP

    memory = await memory_factory()
    nested: object = "最里面"
    for _ in range(5000):  # deeper than Python's recursion limit
        nested = {"type": "node", "data": {"content": [nested]}}
    outcome = await memory.parts.writer.add_turn(
        user_turn("一条转发的聊天记录", raw_segments=[nested])
    )
    assert outcome.turn is not None
    row = await stored_row(fresh_dsn, outcome.turn.message_uuid)
    assert row["content"] == "一条转发的聊天记录"
    stored, depth = json.loads(row["raw_segments"]), 0
    while isinstance(stored, (list, dict)):  # segment list -> node -> data -> content list
        if isinstance(stored, list):
            stored = stored[0]
        else:
            stored = stored["data"] if "data" in stored else stored["content"]
        depth += 1
    assert stored == JSON_TOO_DEEP and depth == JSON_DEPTH_LIMIT


# Text a user can send that PostgreSQL or UTF-8 cannot take as is, and what is stored instead.
# The last one also holds a backslash-u-0000 typed as text, which must stay as typed.
ODD_TEXTS = [
    ("nul", "a\x00b", "ab"),
    ("high-surrogate", "高\ud83d位", "高\ufffd位"),
    ("low-surrogate", "低\ude00位", "低\ufffd位"),
    ("mixed", "混\x00合\ud83d😀\ude00 C:\\u0000", "混合\ufffd😀\ufffd C:\\u0000"),
]


async def stored_row(dsn: str, message_uuid: str) -> asyncpg.Record:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchrow(
            "SELECT content, sender_name, raw_segments FROM dialogues WHERE message_uuid = $1",
            message_uuid,
        )
    finally:
        await conn.close()


@pytest.mark.parametrize(
    "text,cleaned", [(t, c) for _, t, c in ODD_TEXTS], ids=[n for n, *_ in ODD_TEXTS]
)
async def test_odd_text_in_sender_name_and_raw_segments_is_stored_cleaned(
    memory_factory, fresh_dsn, text, cleaned
):
    memory = await memory_factory()
    segments = [{"type": "text", "data": {"text": text, text: [text, 1.5, None]}}]
    outcome = await memory.parts.writer.add_turn(
        user_turn(text, sender_name=text, raw_segments=segments, message_id=5)
    )
    assert outcome.turn is not None
    row = await stored_row(fresh_dsn, outcome.turn.message_uuid)
    assert row["content"] == cleaned and row["sender_name"] == cleaned
    assert json.loads(row["raw_segments"]) == [
        {"type": "text", "data": {"text": cleaned, cleaned: [cleaned, 1.5, None]}}
    ]


def test_invalid_settings_are_named_in_one_line_without_their_values():
    from memory_core.errors import ConfigError
    from memory_core.settings import settings_from_mapping

    with pytest.raises(ConfigError) as refused:
        settings_from_mapping({"MEMORY_TOP_N": "abc", "LLM_TEMPERATURE": "9.5"})
    text = str(refused.value)
    assert "\n" not in text and "abc" not in text and "9.5" not in text
    assert "MEMORY_TOP_N: Input should be a valid integer" in text
    assert "LLM_TEMPERATURE: Input should be less than or equal to 2" in text
