"""What of a PostgreSQL URL the bot's driver (asyncpg) understands, and ``connect_timeout``.

asyncpg sends every query parameter of a DSN it does not know to the server as a setting, so
libpq's client options that operators copy from other tools (``?connect_timeout=10``) become
``unrecognized configuration parameter`` at every connect: the bot could never reach its
database, and on a reconnect it said so only at DEBUG. ``connect_timeout`` is honoured here
(it bounds each host's connect, as in libpq); the other client-only options are refused when
the settings are read, with the option's name.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

CONNECT_TIMEOUT = "connect_timeout"

# libpq connection options that are neither asyncpg's own nor server settings.
UNSUPPORTED_CLIENT_OPTIONS = frozenset(
    {
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
        "hostaddr",
        "fallback_application_name",
        "channel_binding",
        "gssencmode",
        "requiressl",
        "sslcompression",
        "sslcrl",
        "sslcrldir",
        "sslsni",
        "require_auth",
        "replication",
        "load_balance_hosts",
        "client_encoding",
    }
)


def dsn_problem(dsn: str) -> str | None:
    """Why ``dsn`` cannot be used as it is, in one line, or ``None``."""
    for key, value in _query(dsn):
        if key in UNSUPPORTED_CLIENT_OPTIONS:
            return f"the option {key} is not supported by the bot's PostgreSQL driver; remove it"
        if key == CONNECT_TIMEOUT and _seconds(value) is None:
            return f"connect_timeout must be a number of seconds, got {value!r}"
    return None


def split_connect_timeout(dsn: str) -> tuple[str, float | None]:
    """``dsn`` without ``connect_timeout``, and that timeout in seconds (``None`` if absent;
    libpq reads 0 as "no limit", which is ``None`` too)."""
    query = _query(dsn)
    kept = [(key, value) for key, value in query if key != CONNECT_TIMEOUT]
    if len(kept) == len(query):
        return dsn, None
    timeouts = [_seconds(value) for key, value in query if key == CONNECT_TIMEOUT]
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(query=urlencode(kept))), timeouts[-1] or None


def _query(dsn: str) -> list[tuple[str, str]]:
    return parse_qsl(urlsplit(dsn).query, keep_blank_values=True)


def _seconds(value: str) -> float | None:
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None
