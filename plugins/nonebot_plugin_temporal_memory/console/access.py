"""Who may use the console: the operator's token, a session cookie, CSRF tokens, no cross-site
requests, and a limit on login attempts.

The console is off unless ``MEMORY_CONSOLE_TOKEN`` is set. Logging in with the token gives a
random session id in an HttpOnly, SameSite=Strict cookie (``Secure`` behind HTTPS), kept in
memory only: a restart logs everyone out. Every change also carries the session's CSRF token,
and any request a browser marks as coming from another site (``Sec-Fetch-Site``, ``Origin``)
is refused whatever it carries.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import Request

COOKIE = "tm_console"
SESSION_IDLE = 12 * 3600.0  # seconds a session lives without a request
MAX_SESSIONS = 64
LOGIN_WINDOW = 300.0  # seconds over which failed logins are counted
LOGIN_FAILURES_PER_CLIENT = 5
# No limit over all clients together: one let anybody lock the operator out with 30 wrong
# logins from elsewhere. A 12+ character token is not guessed by spreading guesses out.
MIN_TOKEN_CHARS = 12


@dataclass
class ConsoleSession:
    csrf: str
    last_seen: float


@dataclass
class LoginLimiter:
    """Failed logins per client address over the last ``LOGIN_WINDOW`` seconds: an address
    with too many waits (even with the right token: a guess there is never confirmed), every
    other address may go on trying."""

    clock: Callable[[], float] = time.monotonic
    _failures: dict[str, deque[float]] = field(default_factory=dict)

    def _recent(self, times: deque[float]) -> int:
        cutoff = self.clock() - LOGIN_WINDOW
        while times and times[0] < cutoff:
            times.popleft()
        return len(times)

    def blocked(self, client: str) -> bool:
        return self._recent(self._failures.setdefault(client, deque())) >= LOGIN_FAILURES_PER_CLIENT

    def failed(self, client: str) -> None:
        self._failures.setdefault(client, deque()).append(self.clock())
        if len(self._failures) > 10_000:  # forget quiet clients rather than grow without end
            for key in [k for k, v in self._failures.items() if not self._recent(v)]:
                del self._failures[key]


class ConsoleAccess:
    """The token check, the sessions and the request checks of the console."""

    def __init__(self, token: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._token = token.encode("utf-8")
        self._clock = clock
        self._sessions: dict[str, ConsoleSession] = {}
        self.limiter = LoginLimiter(clock)

    def token_matches(self, given: str) -> bool:
        return hmac.compare_digest(given.encode("utf-8"), self._token)

    def open_session(self) -> tuple[str, ConsoleSession]:
        now = self._clock()
        for sid in [s for s, v in self._sessions.items() if now - v.last_seen > SESSION_IDLE]:
            del self._sessions[sid]
        while len(self._sessions) >= MAX_SESSIONS:  # the least recently used goes
            oldest = min(self._sessions, key=lambda s: self._sessions[s].last_seen)
            del self._sessions[oldest]
        sid = secrets.token_urlsafe(32)
        session = ConsoleSession(csrf=secrets.token_urlsafe(32), last_seen=now)
        self._sessions[sid] = session
        return sid, session

    def close_session(self, request: Request) -> None:
        self._sessions.pop(request.cookies.get(COOKIE, ""), None)

    def session_of(self, request: Request) -> ConsoleSession | None:
        """The request's live session, or ``None`` (no cookie, unknown or idle too long)."""
        session = self._sessions.get(request.cookies.get(COOKIE, ""))
        if session is None:
            return None
        now = self._clock()
        if now - session.last_seen > SESSION_IDLE:
            self._sessions.pop(request.cookies.get(COOKIE, ""), None)
            return None
        session.last_seen = now
        return session

    @staticmethod
    def csrf_matches(session: ConsoleSession, given: str) -> bool:
        return hmac.compare_digest(given.encode("utf-8"), session.csrf.encode("utf-8"))


def cross_site(request: Request) -> bool:
    """Whether a browser says this request comes from another site (or we cannot tell for a
    change: a POST without ``Origin`` or ``Sec-Fetch-Site`` is refused too)."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return True
    origin = request.headers.get("origin")
    if origin is not None and origin != own_origin(request):
        return True
    return request.method == "POST" and origin is None and fetch_site is None


def own_origin(request: Request) -> str:
    host = request.headers.get("host", "")
    return f"{request.url.scheme}://{host}"


def client_of(request: Request) -> str:
    return request.client.host if request.client else "unknown"
