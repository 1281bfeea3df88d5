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
