"""Parsing extraction answers in every shape models send; the unusable ones are rejected."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from memory_core.distill.extraction import (
    ExtractionParseError,
    parse_items,
    parse_json_answer,
    parse_summary,
)
from memory_core.distill.memory import DistilledMemory, restates
from tests.fakes import stored_fact

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=timezone.utc)

# Each answer holds the same two facts; the shapes are the ones seen from real models.
FACT_ANSWERS = {
    "plain list": '[{"fact": "用户住在北京", "category": "personal_info", "confidence": 0.9},'
    ' {"fact": "用户养了一只猫", "category": "habit", "confidence": 0.8}]',
    "fenced": '```json\n[{"fact": "用户住在北京", "category": "personal_info", "confidence": 0.9},'
    '\n {"fact": "用户养了一只猫", "category": "habit", "confidence": 0.8}]\n```',
    "fence without language": '```\n[{"fact": "用户住在北京"}, {"fact": "用户养了一只猫"}]\n```',
    "prose around": '好的，以下是提取结果：\n[{"fact": "用户住在北京"}, {"fact": "用户养了一只猫"}]'
    "\n以上是全部事实。",
    "trailing commas": '[{"fact": "用户住在北京", "confidence": 0.9,},'
    ' {"fact": "用户养了一只猫",},]',
    "single quotes": "[{'fact': '用户住在北京', 'confidence': 0.9}, {'fact': '用户养了一只猫'}]",
    "python literals": "[{'fact': '用户住在北京', 'same_as': None}, {'fact': '用户养了一只猫'}]",
    "unquoted keys": '[{fact: "用户住在北京", confidence: 0.9}, {fact: "用户养了一只猫"}]',
    "full-width punctuation": '[{"fact"："用户住在北京"，"confidence"：0.9}，'
    '{"fact"："用户养了一只猫"}]',
    "object with list": '{"facts": [{"fact": "用户住在北京"}, {"fact": "用户养了一只猫"}]}',
    "object with other key": '{"extracted": [{"fact": "用户住在北京"},'
    ' {"fact": "用户养了一只猫"}]}',
    "list of strings": '["用户住在北京", "用户养了一只猫"]',
    "reasoning first": '<think>用户说了 [住址] 和 {宠物}</think>[{"fact": "用户住在北京"},'
    ' {"fact": "用户养了一只猫"}]',
    "bracket in prose first": '根据[对话]，结果是：[{"fact": "用户住在北京"},'
    ' {"fact": "用户养了一只猫"}]',
    "content key": '[{"content": "用户住在北京"}, {"text": "用户养了一只猫"}]',
}


@pytest.mark.parametrize("shape", sorted(FACT_ANSWERS))
def test_fact_answers_in_every_common_shape_are_parsed(shape):
    facts = parse_items(FACT_ANSWERS[shape], "facts")
    assert [f.content for f in facts] == ["用户住在北京", "用户养了一只猫"]


@pytest.mark.parametrize("answer", ["[]", "无", "没有。", "NONE", "{}", '{"facts": []}', "  "])
def test_explicit_nothing_is_an_empty_result_not_a_failure(answer):
    assert parse_items(answer, "facts") == []


@pytest.mark.parametrize(
    "answer",
    [
        "用户住在北京，养了一只猫。",  # prose only
        '[{"fact": "用户住在北京"',  # cut off
        '{"a": [1], "b": [2]}',  # an object with two lists: which one?
        '{"name": "小明"}',  # an object without any list or fact
        "42",
        "```json\n这里本该有 JSON\n```",
    ],
)
def test_unusable_answers_are_rejected_cleanly(answer):
    with pytest.raises(ExtractionParseError):
        parse_items(answer, "facts")


def test_fields_are_validated_and_clamped():
    answer = (
        '[{"fact": "  用户\\n住在  北京 ", "category": "Personal Info", "confidence": "90%"},'
        ' {"fact": "用户是老师", "category": "星座", "confidence": 7},'
        ' {"fact": "", "confidence": 1}, {"category": "work"}, 5, null,'
        ' {"fact": "用户爱喝茶", "confidence": "很高"}]'
    )
    facts = parse_items(answer, "facts")
    assert [(f.content, f.category, f.score) for f in facts] == [
        ("用户 住在 北京", "personal_info", 0.9),
        ("用户是老师", "other", 0.07),
        ("用户爱喝茶", "other", 0.5),
    ]


def known(*contents: str) -> list[DistilledMemory]:
    return [stored_fact(c, T0, id=100 + i) for i, c in enumerate(contents)]


def test_same_as_and_replaces_map_prompt_numbers_to_row_ids_and_ignore_unknown_numbers():
    rows = known("用户住在北京", "用户的老板叫张总")
    answer = (
        '[{"fact": "用户搬到上海了", "replaces": [1, 7]},'
        ' {"fact": "用户老板是张总", "same_as": "2"},'
        ' {"fact": "用户换了工作", "replaces": "#2"},'
        ' {"fact": "用户有车", "same_as": 0}]'
    )
    facts = parse_items(answer, "facts", rows)
    assert [(f.same_as, f.replaces) for f in facts] == [
        (None, (100,)),
        (101, ()),
        (None, (101,)),
        (None, ()),
    ]


def test_preferences_keep_strength_and_evidence():
    answer = (
        '{"preferences": [{"preference": "喜欢简洁的回复", "category": "communication_style",'
        ' "strength": 0.8, "evidence": ["多次要求简短回答", "跳过详细解释", "多次要求简短回答"]},'
        ' {"preference": "早上查天气", "category": "time", "evidence": "每天早上问天气"}]}'
    )
    prefs = parse_items(answer, "preferences")
    assert [(p.content, p.category, p.score, p.evidence) for p in prefs] == [
        ("喜欢简洁的回复", "communication_style", 0.8, ("多次要求简短回答", "跳过详细解释")),
        ("早上查天气", "time", 0.5, ("每天早上问天气",)),
    ]


@pytest.mark.parametrize(
    "answer",
    [
        '{"summary": "用户确认了明天下午3点的会议", "key_topics": ["日程", "会议"],'
        ' "sentiment": "neutral", "action_items": ["提醒明天会议"]}',
        '```json\n{"summary": "用户确认了明天下午3点的会议", "key_topics": ["日程", "会议"],'
        ' "sentiment": "neutral", "action_items": ["提醒明天会议"],}\n```\n希望有帮助！',
        '[{"summary": "用户确认了明天下午3点的会议", "key_topics": ["日程", "会议"],'
        ' "action_items": ["提醒明天会议"]}]',
        "{'summary': '用户确认了明天下午3点的会议', 'key_topics': ['日程', '会议'],"
        " 'sentiment': 'NEUTRAL', 'action_items': ['提醒明天会议']}",
    ],
)
def test_summaries_are_parsed_from_common_shapes(answer):
    summary = parse_summary(answer)
    assert summary is not None
    assert (summary.content, summary.key_topics, summary.sentiment, summary.action_items) == (
        "用户确认了明天下午3点的会议",
        ("日程", "会议"),
        "neutral",
        ("提醒明天会议",),
    )


def test_summary_answers_without_a_summary_are_rejected_or_empty():
    assert parse_summary("无") is None
    assert parse_summary('{"summary": ""}') is None
    with pytest.raises(ExtractionParseError):
        parse_summary('{"topics": ["a"]}')
    with pytest.raises(ExtractionParseError):
        parse_summary("这段对话主要在聊天气。")


def test_a_huge_answer_is_bounded():
    answer = "[" + ",".join(f'{{"fact": "用户喜欢第{i}号{"很" * 400}"}}' for i in range(50)) + "]"
    facts = parse_items(answer, "facts")
    assert len(facts) == 20 and all(len(f.content) <= 300 for f in facts)


def test_parse_json_answer_prefers_the_fenced_block():
    assert parse_json_answer('示例：[1]\n```json\n[{"fact": "x"}]\n```') == [{"fact": "x"}]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("用户住在北京", "用户住在北京。"),
        ("用户住在北京", "用户住在北京市"),
        ("用户喜欢喝咖啡", "用户很喜欢喝咖啡"),
        ("User likes coffee", "user really likes coffee"),
    ],
)
def test_restatements_are_recognised(a, b):
    assert restates(a, b) and restates(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("用户住在北京", "用户住在上海"),
        ("用户的老板叫张总", "用户的老板叫李总"),
        ("用户姓王", "用户姓李"),
        ("用户的生日是5月3日", "用户的生日是5月4日"),
        ("用户喜欢吃辣", "用户不喜欢吃辣"),
        ("用户在北京的一家互联网公司做后端开发", "用户在上海的一家互联网公司做后端开发"),
        ("User lives in Paris", "User lives in London"),
        ("user likes tea", "user does not like tea"),
    ],
)
def test_a_changed_name_place_number_or_negation_is_not_a_restatement(a, b):
    assert not restates(a, b) and not restates(b, a)


LINES = (101, 102, 103)  # the turn ids of a three-line conversation


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        ("[2]", (102,)),
        ('[3, "1", "[3]", "#2"]', (103, 101, 102)),
        ("2", (102,)),
        ("[4]", ()),
        ("[0]", ()),
        ("[2, 9]", ()),
        ('["第二行"]', ()),
        ("[1.5]", ()),
        ("[true]", ()),
        ("[]", ()),
        ("null", ()),
        ('{"line": 2}', ()),
    ],
)
def test_cited_lines_become_turn_ids_and_any_bad_number_falls_back_to_the_batch(sources, expected):
    answer = f'[{{"fact": "用户住在北京", "sources": {sources}}}]'
    [fact] = parse_items(answer, "facts", (), LINES)
    assert fact.source_turn_ids == expected
    [preference] = parse_items(
        f'[{{"preference": "喜欢简短的回答", "sources": {sources}}}]', "preferences", (), LINES
    )
    assert preference.source_turn_ids == expected
