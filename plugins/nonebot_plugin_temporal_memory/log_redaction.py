"""Keeps the web server's log lines free of the OneBot token and of refusal floods.

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

SERVER_LOGGERS = ("uvicorn.access", "uvicorn.error")
_TOKEN_IN_QUERY = re.compile(r"(?i)(access_token=)[^&\s\"']*")


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
