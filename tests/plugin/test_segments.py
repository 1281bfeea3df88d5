"""Segment flattening: what the LLM and the store see of a QQ message."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest


@pytest.fixture
def seg(plugin: Any) -> ModuleType:
    """The plugin's segments module (importing the plugin needs NoneBot initialised)."""
    from nonebot_plugin_temporal_memory import segments

    return segments


# Segment shapes as NapCat sends them (NapNeko/NapCatQQ msg.ts), see shared/onebot/.
NAPCAT_FACE = {
    "type": "face",
    "data": {"id": "178", "raw": {"faceIndex": 178, "faceText": "/斜眼笑"}, "resultId": None},
}
NAPCAT_IMAGE = {
    "type": "image",
    "data": {"summary": "", "file": "ABCDEF.jpg", "sub_type": 0, "url": "https://x/y?z"},
}


def text(value: str) -> dict[str, object]:
    return {"type": "text", "data": {"text": value}}


def at(qq: str, **extra: str) -> dict[str, object]:
    return {"type": "at", "data": {"qq": qq, **extra}}


def test_text_segments_join_and_keep_inner_newlines(seg: ModuleType) -> None:
    assert seg.flatten_segments([text("  line1\n"), text("line2  ")]) == "line1\nline2"


def test_image_becomes_placeholder_not_url(seg: ModuleType) -> None:
    assert seg.flatten_segments([text("看"), NAPCAT_IMAGE]) == "看[图片]"


def test_sticker_image_uses_summary_or_sub_type(seg: ModuleType) -> None:
    sticker = {"type": "image", "data": {"summary": "[动画表情]", "sub_type": 1, "file": "a"}}
    assert seg.segment_to_text(sticker) == "[动画表情]"
    gocq_sticker = {"type": "image", "data": {"file": "a.image", "subType": "1", "sub_type": "1"}}
    assert seg.segment_to_text(gocq_sticker) == "[动画表情]"


def test_napcat_face_uses_its_own_name(seg: ModuleType) -> None:
    assert seg.segment_to_text(NAPCAT_FACE) == "[表情:斜眼笑]"


def test_gocq_face_id_is_named_from_table_or_generic(seg: ModuleType) -> None:
    assert seg.segment_to_text({"type": "face", "data": {"id": "14"}}) == "[表情:微笑]"
    assert seg.segment_to_text({"type": "face", "data": {"id": "99999"}}) == "[表情]"
    assert seg.segment_to_text({"type": "face", "data": {"id": "x"}}) == "[表情]"


def test_at_uses_known_name_then_segment_name_then_number(seg: ModuleType) -> None:
    names = {"20002": "Alice"}
    assert seg.segment_to_text(at("20002"), names=names) == "@Alice"
    assert seg.segment_to_text(at("30003", name="@Bob")) == "@Bob"
    assert seg.segment_to_text(at("40004")) == "@40004"
    assert seg.segment_to_text(at("all")) == "@全体成员"


def test_at_of_the_bot_shows_the_bot_name(seg: ModuleType) -> None:
    segs = [at("10001"), text(" 你好")]
    assert seg.flatten_segments(segs, self_id=10001, self_name="小诗") == "@小诗 你好"


def test_other_segment_types_have_readable_placeholders(seg: ModuleType) -> None:
    assert seg.segment_to_text({"type": "record", "data": {"file": "a.amr"}}) == "[语音]"
    assert seg.segment_to_text({"type": "dice", "data": {"result": "3"}}) == "[骰子:3]"
    assert seg.segment_to_text({"type": "poke", "data": {"type": "1", "id": "1"}}) == "[戳一戳]"
    assert seg.segment_to_text({"type": "file", "data": {"name": "报告.pdf"}}) == "[文件:报告.pdf]"
    assert seg.segment_to_text({"type": "reply", "data": {"id": "5"}}) == "[回复]"
    assert seg.segment_to_text({"type": "brand_new_thing", "data": {}}) == "[brand_new_thing]"


def test_json_card_shows_its_prompt(seg: ModuleType) -> None:
    card = {"type": "json", "data": {"data": json.dumps({"prompt": "[QQ小程序]哔哩哔哩"})}}
    assert seg.segment_to_text(card) == "[QQ小程序]哔哩哔哩"
    broken = {"type": "json", "data": {"data": "{not json"}}
    assert seg.segment_to_text(broken) == "[卡片消息]"


def test_malformed_segments_never_raise(seg: ModuleType) -> None:
    weird: list[object] = [
        {"type": "text"},
        {"type": "text", "data": None},
        {"type": "at", "data": {}},
        {"data": {"text": "x"}},
        "not a segment",
        {"type": "text", "data": {"text": 5}},
    ]
    assert seg.flatten_segments(weird) == "5"  # type: ignore[arg-type]


def test_cq_injection_text_stays_literal(seg: ModuleType) -> None:
    assert seg.flatten_segments([text("[CQ:at,qq=all] hi")]) == "[CQ:at,qq=all] hi"


def test_quote_reply_is_one_short_line(seg: ModuleType) -> None:
    assert seg.quote_reply("小明", "第一行\n第二行") == "[回复 小明: 第一行 第二行]"
    long = seg.quote_reply("小明", "字" * 200, max_chars=10)
    assert long == "[回复 小明: " + "字" * 10 + "…]"
    assert seg.quote_reply(None, "") == "[回复]"
    assert seg.with_quote("[回复 小明: 在吗]", "在的") == "[回复 小明: 在吗] 在的"
    assert seg.with_quote(None, "在的") == "在的"
    assert seg.with_quote("[回复]", "") == "[回复]"


def test_at_targets_lists_mentions_once_without_all(seg: ModuleType) -> None:
    segs = [at("1"), text(" "), at("all"), at("2"), at("1")]
    assert seg.at_targets(segs) == ["1", "2"]
