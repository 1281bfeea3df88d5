"""Reading QQ PC text exports (hand-written samples under fixtures/) and placing their messages
in sessions."""

from __future__ import annotations

import codecs
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from memory_core.transfer.encoding import DecodedText, decode_export
from memory_core.transfer.qq_text import parse_qq_text
from memory_core.transfer.target import ImportTarget, QQTextRouter, pick_chat

FIXTURES = Path(__file__).parent / "fixtures"
SHANGHAI = ZoneInfo("Asia/Shanghai")


def read(name: str):
    return parse_qq_text(decode_export((FIXTURES / name).read_bytes()).text)


def test_private_export_with_bom_and_crlf_reads_every_block_and_keeps_multiline_text():
    export = read("qq_private.txt")
    assert export.chats == ("小明",)
    assert export.problems == ()
    first, _, third, *_ = export.messages
    assert (first.line, first.time, first.sender, first.qq) == (
        9,
        datetime(2024, 1, 16, 10, 30, 15),
        "小明",
        123456,
    )
    assert third.text == "对了，我的订单号是ORD20240116\n帮我记一下"
    assert export.messages[-1].is_system


def test_utf16_group_export_strips_titles_and_reads_senders_without_numbers():
    export = read("qq_group_utf16.txt")
    assert export.chats == ("周末羽毛球群",)
    senders = [(m.sender, m.qq) for m in export.messages]
    assert senders == [
        ("阿强", 222222),
        ("小红", 333333),
        ("小诗", 10001),
        ("阿强", None),
        ("路人甲", None),
    ]


def test_names_only_export_with_slashes_unpadded_times_and_email_senders():
    export = read("qq_private_names_only.txt")
    assert [(m.time, m.sender, m.qq) for m in export.messages] == [
        (datetime(2022, 3, 5, 9, 5, 3), "老王", None),
        (datetime(2022, 3, 5, 9, 6, 0), "小诗", None),
        (datetime(2022, 3, 5, 21, 0, 0), "老王", None),
    ]


def test_malformed_export_reports_bad_lines_by_number_and_keeps_the_good_messages():
    export = read("qq_malformed.txt")
    assert [m.text for m in export.messages] == ["第一条正常消息", "第二条正常消息"]
    assert [p.line for p in export.problems] == [1, 7]
    assert "not a message header" in export.problems[0].reason
    assert "no such time" in export.problems[1].reason


def test_gb18030_and_utf16_without_bom_decode_to_the_same_text():
    text = "消息对象:小明\n2024-01-16 10:30:15 小明(123456)\n你好\n"
    assert decode_export(text.encode("gb18030")) == DecodedText(text, "GB18030")
    assert decode_export(text.encode("utf-16-le")) == DecodedText(text, "UTF-16")
    assert decode_export(codecs.BOM_UTF16_BE + text.encode("utf-16-be")).text == text


def test_a_utf8_export_with_one_gb18030_line_keeps_its_utf8_lines_and_names_the_line():
    utf8 = "消息对象:小明\n2024-01-16 10:30:15 小明(123456)\n你好，我下周三要去杭州出差\n"
    data = utf8.encode("utf-8") + "记得带伞\n".encode("gb18030")
    decoded = decode_export(data)
    assert decoded.text == utf8 + "记得带伞\n"
    assert decoded.encoding == "UTF-8, 1 line(s) GB18030"
    assert len(decoded.warnings) == 1 and "line(s) 4 are not UTF-8" in decoded.warnings[0]


def test_a_shift_jis_export_read_as_gb18030_is_reported_as_doubtful():
    text = (
        "2024-01-16 10:30:15 田中(123456)\n明日の会議は午後三時からです。よろしくお願いします。\n"
    )
    decoded = decode_export(text.encode("shift_jis"))
    assert decoded.encoding == "GB18030"
    assert len(decoded.warnings) == 1 and "--encoding shift_jis" in decoded.warnings[0]
    assert decode_export(text.encode("shift_jis"), "shift_jis") == DecodedText(text, "shift_jis")
    chinese = "2024-01-16 10:30:15 小明(123456)\n明天下午三点开会，记得带上上周的报告和电脑。\n"
    assert decode_export(chinese.encode("gb18030")).warnings == ()


def test_two_exports_joined_into_one_file_keep_each_message_whole():
    one = (FIXTURES / "qq_private.txt").read_bytes()
    export = parse_qq_text(decode_export(one + one).text)
    alone = read("qq_private.txt").messages
    assert [m.text for m in export.messages] == [m.text for m in alone] * 2
    assert export.problems == ()


def test_private_router_tells_the_user_from_the_bot_and_keeps_repeated_lines_apart():
    export = read("qq_private.txt")
    router = QQTextRouter(ImportTarget(user_id=123456, self_id=10001), SHANGHAI, "小明")
    placed = list(router.turns(export.messages))
    assert [(t.role, t.session_key) for _, t in placed] == [
        ("user", "123456"),
        ("assistant", "123456"),
        ("user", "123456"),
        ("user", "123456"),
        ("user", "123456"),
    ]
    assert placed[0][1].created_at == datetime(2024, 1, 16, 10, 30, 15, tzinfo=SHANGHAI)
    repeated = [t.message_uuid for _, t in placed[3:]]
    assert repeated[0] != repeated[1]  # two "哈哈" in one second are two turns
    assert router.system_lines == 1 and router.problems == []
    # The same file gives the same ids.
    again = QQTextRouter(ImportTarget(user_id=123456, self_id=10001), SHANGHAI, "小明")
    assert [t.message_uuid for _, t in again.turns(export.messages)] == [
        t.message_uuid for _, t in placed
    ]


def test_group_router_files_members_in_their_sessions_and_the_bot_under_the_last_speaker():
    export = read("qq_group_utf16.txt")
    router = QQTextRouter(ImportTarget(group_id=777, self_id=10001), SHANGHAI)
    placed = [(t.session_key, t.role, t.content) for _, t in router.turns(export.messages)]
    assert placed == [
        ("777:222222", "user", "这周六下午三点，老地方打球"),
        ("777:333333", "user", "我去！我带两筒球"),
        ("777:333333", "assistant", "收到，周六下午三点，小红带球。"),
        ("777:222222", "user", "小红记得带球拍套"),  # 阿强's number from an earlier line
    ]
    [problem] = router.problems
    assert problem.line == 21 and "路人甲" in problem.reason


def test_names_only_private_export_uses_the_chat_name_for_the_user():
    export = read("qq_private_names_only.txt")
    router = QQTextRouter(ImportTarget(user_id=555), SHANGHAI, export.chats[0])
    roles = [t.role for _, t in router.turns(export.messages)]
    assert roles == ["user", "assistant", "user"]
    nameless = QQTextRouter(ImportTarget(user_id=555), SHANGHAI, None)
    assert list(nameless.turns(export.messages)) == []
    assert "--user-name" in nameless.problems[0].reason


def test_an_export_of_several_chats_needs_one_picked():
    text = (
        "消息对象:小明\n2024-01-16 10:30:15 小明(1001)\n你好\n"
        "================================================================\n"
        "消息对象:小红\n2024-01-16 11:00:00 小红(1002)\n在吗\n"
    )
    export = parse_qq_text(text)
    with pytest.raises(ValueError, match="several chats"):
        pick_chat(export, None)
    assert [m.text for m in pick_chat(export, "小红")] == ["在吗"]
    with pytest.raises(ValueError, match="no chat"):
        pick_chat(export, "老王")


def test_a_target_is_a_private_chat_or_a_group_never_both():
    with pytest.raises(ValueError):
        ImportTarget(user_id=1, group_id=2)
    with pytest.raises(ValueError):
        ImportTarget()
