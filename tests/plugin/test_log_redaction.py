"""The web server's log lines, as uvicorn makes them, pass the plugin's filters: a token in a
URL is masked, a refused WebSocket handshake's own line is dropped, other lines pass."""

from __future__ import annotations

import logging
from typing import Any


def record(msg: str, *args: Any) -> logging.LogRecord:
    return logging.LogRecord("uvicorn.access", logging.INFO, "h.py", 1, msg, args, None)


def test_a_token_in_a_logged_url_is_masked(plugin: Any):
    from nonebot_plugin_temporal_memory.log_redaction import TokenQueryFilter

    line = record(
        '%s - "%s %s HTTP/%s" %d', "127.0.0.1:5", "GET", "/x?a=1&access_token=s3cr3t", "1.1", 404
    )
    assert TokenQueryFilter().filter(line)
    assert "s3cr3t" not in line.getMessage() and "access_token=***" in line.getMessage()
    assert "a=1" in line.getMessage()


def test_refused_handshakes_are_dropped_and_accepted_ones_kept(plugin: Any):
    from nonebot_plugin_temporal_memory.log_redaction import RefusedHandshakeFilter

    keep = RefusedHandshakeFilter()
    assert not keep.filter(record('%s - "WebSocket %s" 403', "127.0.0.1:5", "/onebot/v11/ws"))
    assert not keep.filter(record('%s - "WebSocket %s" %d', "127.0.0.1:5", "/onebot/v11", 403))
    assert keep.filter(record('%s - "WebSocket %s" [accepted]', "127.0.0.1:5", "/onebot/v11/ws"))
    assert keep.filter(record('%s - "WebSocket %s" %d', "127.0.0.1:5", "/onebot/v11/ws", 500))


def test_the_filters_sit_on_uvicorns_loggers(plugin: Any):
    from nonebot_plugin_temporal_memory.log_redaction import (
        SERVER_LOGGERS,
        RefusedHandshakeFilter,
        TokenQueryFilter,
    )

    for name in SERVER_LOGGERS:
        kinds = {type(f) for f in logging.getLogger(name).filters}
        assert {TokenQueryFilter, RefusedHandshakeFilter} <= kinds


def event_record(message: str, *, function: str = "handle_event") -> dict[str, Any]:
    """What loguru hands a patcher for NoneBot's line about an event (the fields read)."""
    return {
        "message": message,
        "function": function,
        "name": "nonebot",  # as NoneBot's own patcher names it
        "exception": None,
    }


def test_nonebots_line_for_a_message_keeps_its_ids_and_the_texts_length(plugin: Any):
    from nonebot.adapters.onebot.v11 import Adapter

    from nonebot_plugin_temporal_memory.log_redaction import hide_message_text
    from tests.plugin.events import message_payload, text_seg

    said = "我的银行卡密码是778899，别告诉别人"
    for group_id, who in ((None, "20002"), (30001, "20002@[群:30001]")):
        payload = message_payload([text_seg(said)], group_id=group_id, message_id=6011)
        event = Adapter.json_to_event(payload)
        assert event is not None
        record = event_record(f"OneBot V11 10001 | {event.get_log_string()}")
        hide_message_text(record)  # type: ignore[arg-type]
        assert record["message"].endswith(f"]: Message 6011 from {who} ({len(said)} chars)")
        assert record["message"].startswith("OneBot V11 10001 | [message.")


def test_other_events_keep_their_ids_and_kinds_and_lose_their_texts(plugin: Any):
    from nonebot.adapters.onebot.v11 import Adapter

    from nonebot_plugin_temporal_memory.log_redaction import hide_message_text

    request = {
        "time": 1, "self_id": 10001, "post_type": "request", "request_type": "friend",
        "user_id": 20005, "comment": "我是张三，电话13800000000", "flag": "f1",
    }  # fmt: skip
    event = Adapter.json_to_event(request)
    assert event is not None
    record = event_record(f"OneBot V11 10001 | {event.get_log_string()}")
    hide_message_text(record)  # type: ignore[arg-type]
    assert "张三" not in record["message"] and "13800000000" not in record["message"]
    assert "'request_type': 'friend'" in record["message"]
    assert "'user_id': 20005" in record["message"]
    # A line that is not NoneBot's line about an event is left as it is.
    other = event_record("Event will be handled by Matcher(...)", function="_check_matcher")
    hide_message_text(other)  # type: ignore[arg-type]
    assert other["message"] == "Event will be handled by Matcher(...)"


def test_an_unreadable_events_raw_json_leaves_the_line(plugin: Any):
    from nonebot_plugin_temporal_memory.log_redaction import hide_message_text

    raw = "{'post_type': 'message', 'message': '我的银行卡密码是778899'}"
    record = event_record(f"OneBot V11 | Failed to parse event. Raw: {raw}", function="x")
    hide_message_text(record)  # type: ignore[arg-type]
    assert record["message"] == f"OneBot V11 | Failed to parse event. Raw: ({len(raw)} chars)"
