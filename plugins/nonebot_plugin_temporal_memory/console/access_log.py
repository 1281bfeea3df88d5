"""Keeps what the operator types out of the web server's access log.

The session page's search box sends its text in the query string (a GET form, so a search is
a link that can be bookmarked and paged); uvicorn's access log would write it down with every
request. This filter drops the query of the console's paths from those lines.
"""

from __future__ import annotations

import logging

ACCESS_LOGGER = "uvicorn.access"
PATH_ARG = 2  # uvicorn's access line: (client, method, path with query, HTTP version, status)


class ConsoleQueryFilter(logging.Filter):
    """Removes the query string of paths under ``base`` from uvicorn's access lines."""

    def __init__(self, base: str) -> None:
        super().__init__()
        self.base = base

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if not isinstance(args, tuple) or len(args) <= PATH_ARG:
            return True
        full_path = args[PATH_ARG]
        if isinstance(full_path, str):
            path, query_mark, _ = full_path.partition("?")
            if query_mark and (path == self.base or path.startswith(self.base + "/")):
                record.args = (*args[:PATH_ARG], path + "?…", *args[PATH_ARG + 1 :])
        return True


def hide_console_queries(base: str) -> None:
    """Install the filter once (uvicorn keeps a logger's filters when it configures logging)."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, ConsoleQueryFilter) for f in logger.filters):
        logger.addFilter(ConsoleQueryFilter(base))
