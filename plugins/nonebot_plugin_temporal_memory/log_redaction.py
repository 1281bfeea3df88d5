"""Keeps the OneBot access token out of the web server's log lines.

A OneBot client may send its token in the URL (``/onebot/v11/ws?access_token=…``, which
go-cqhttp and Lagrange offer); uvicorn writes the path with its query into every WebSocket and
access line, so the token would sit in the log in clear text. This filter masks the value of
any ``access_token`` query parameter in those lines' arguments.
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


def hide_access_tokens() -> None:
    """Install the filter once on uvicorn's loggers (it keeps their filters when it
    configures logging)."""
    for name in SERVER_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, TokenQueryFilter) for f in logger.filters):
            logger.addFilter(TokenQueryFilter())


hide_access_tokens()
