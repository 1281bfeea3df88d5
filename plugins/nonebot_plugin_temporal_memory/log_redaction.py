"""Keeps the log free of what people said, of the OneBot token and of refusal floods.

NoneBot logs every event it handles (``OneBot V11 10001 | [message.private.friend]: Message
6011 from 20001 '我的银行卡密码是778899'``), and the line would outlive the message's 撤回 and
the person's /忘记我. ``hide_message_text`` rewrites such a line to its ids and the text's
length; ``hiding_message_text`` wraps a loguru handler's filter with it. ``bot.py`` gives its
handler that filter once the plugins are loaded; a NoneBot project embedding the plugin does
the same in its own start script (``docs/logs.md``). It is a handler's filter,
not a loguru patcher: NoneBot's own patcher (the plugin names in the log) must stay. The
plugin itself never reconfigures a project's log.

A OneBot client may send its token in the URL (``/onebot/v11/ws?access_token=…``, which
go-cqhttp and Lagrange offer); uvicorn writes the path with its query into every WebSocket and
access line, so the token would sit in the log in clear text: ``TokenQueryFilter`` masks it.
A refused client reconnects every few seconds, and uvicorn logs each refused handshake
(``"WebSocket /onebot/v11/ws" 403``); ``ws_access_guard`` already says why, once a minute per
address, so ``RefusedHandshakeFilter`` drops uvicorn's own line.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loguru import Record

LineFilter = Callable[["Record"], bool]

SERVER_LOGGERS = ("uvicorn.access", "uvicorn.error")
_TOKEN_IN_QUERY = re.compile(r"(?i)(access_token=)[^&\s\"']*")


# NoneBot's line for a handled event (``nonebot.message.handle_event``): "<adapter> <self id> |
# [<event name>]: <description>"; OneBot v11 describes a message event as "Message <id> from
# <user>[@[群:<group>]] '<text>'" and any other event as its fields, some of them text (a
# friend request's comment, an uploaded file's name).
_EVENT_LINE = re.compile(r"(?P<head>.*?\| \[[\w.]+\]: )(?P<body>.*)", re.S)
_MESSAGE = re.compile(r"(?P<who>Message -?\d+ from \S+) (?P<text>.*)", re.S)
_PLAIN_FIELD = re.compile(r"'(?:\w*_type|\w*_id|time|duration)': (?:'[\w.-]*'|-?\d+)")
_RAW_EVENT = "Failed to parse event. Raw: "
_NONEBOT_NAMES = frozenset({"nonebot", "nonebot.message"})


def _described_without_text(body: str) -> str:
    message = _MESSAGE.fullmatch(body)
    if message is not None:
        # The text is the repr of the message: its quotes are not the person's.
        return f"{message['who']} ({max(len(message['text']) - 2, 0)} chars)"
    if body.startswith("{"):
        fields = _PLAIN_FIELD.findall(body)
        return "{" + ", ".join([*fields, "…"]) + "}"
    return f"({len(body)} chars)"


def hide_message_text(record: Record) -> None:
    """Rewrite ``record``: NoneBot's line for each event keeps its ids, kinds and the text's
    length, never the text; so does the adapter's line for an event it could not read (its
    raw JSON and the validation error quoting it go). Any other line is left alone."""
    message = record["message"]
    # NoneBot's patcher has named the record by its top package by now.
    if record["function"] == "handle_event" and record["name"] in _NONEBOT_NAMES:
        line = _EVENT_LINE.fullmatch(message)
        if line is not None:
            record["message"] = line["head"] + _described_without_text(line["body"])
    elif _RAW_EVENT in message:
        head, _, raw = message.partition(_RAW_EVENT)
        exception = record["exception"]
        error = f", {exception.type.__name__}" if exception and exception.type else ""
        record["message"] = f"{head}{_RAW_EVENT}({len(raw)} chars{error})"
        record["exception"] = None


def hiding_message_text(keep: LineFilter) -> LineFilter:
    """A loguru handler filter: ``keep``'s verdict, on a line whose message texts are hidden
    (``hide_message_text``); e.g. ``filter=hiding_message_text(nonebot.log.default_filter)``."""

    def line_filter(record: Record) -> bool:
        if not keep(record):
            return False
        hide_message_text(record)
        return True

    return line_filter


def masked(text: str) -> str:
    """``text`` with every ``access_token=`` value replaced by ``***``."""
    return _TOKEN_IN_QUERY.sub(r"\1***", text)


class TokenQueryFilter(logging.Filter):
    """Masks ``access_token`` values in a record's string arguments (and its message)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(masked(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str) and "access_token=" in record.msg.lower():
            record.msg = masked(record.msg)
        return True


class RefusedHandshakeFilter(logging.Filter):
    """Drops uvicorn's line for a WebSocket handshake answered 403."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not isinstance(record.msg, str) or '"WebSocket %s"' not in record.msg:
            return True
        if record.msg.endswith(" 403"):
            return False
        args = record.args
        return not (isinstance(args, tuple) and len(args) >= 3 and args[2] == 403)


def hide_access_tokens() -> None:
    """Install the filters once on uvicorn's loggers (it keeps their filters when it
    configures logging)."""
    for name in SERVER_LOGGERS:
        logger = logging.getLogger(name)
        for kind in (TokenQueryFilter, RefusedHandshakeFilter):
            if not any(isinstance(f, kind) for f in logger.filters):
                logger.addFilter(kind())


hide_access_tokens()
