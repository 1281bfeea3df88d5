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
import ipaddress
import secrets
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

from starlette.requests import Request

COOKIE = "tm_console"
SESSION_IDLE = 12 * 3600.0  # seconds a session lives without a request
MAX_SESSIONS = 64
LOGIN_WINDOW = 300.0  # seconds over which failed logins are counted
LOGIN_FAILURES_PER_CLIENT = 5
MAX_CLIENTS = 4096  # clients whose failures are remembered
# No limit over all clients together: one let anybody lock the operator out with 30 wrong
# logins from elsewhere. A 12+ character token is not guessed by spreading guesses out.
MIN_TOKEN_CHARS = 12


@dataclass
class ConsoleSession:
    csrf: str
    last_seen: float


@dataclass
class LoginLimiter:
    """Failed logins per client over the last ``LOGIN_WINDOW`` seconds: a client with too many
    waits (even with the right token: a guess there is never confirmed), every other client may
    go on trying.

    Bounded whatever comes: the last ``LOGIN_FAILURES_PER_CLIENT`` failure times of at most
    ``MAX_CLIENTS`` clients, the client that failed least recently forgotten first, so a try
    costs the same however many addresses were seen (it used to sweep them all: 7 ms a try at
    30,000). A client is an IPv4 address or an IPv6 /64 (one home line or server holds a whole
    /64, and would otherwise get a fresh count with every address of it)."""

    clock: Callable[[], float] = time.monotonic
    _failures: OrderedDict[str, deque[float]] = field(default_factory=OrderedDict)

    def blocked(self, client: str) -> bool:
        times = self._failures.get(limited_as(client))
        return (
            times is not None
            and len(times) == LOGIN_FAILURES_PER_CLIENT
            and times[0] > self.clock() - LOGIN_WINDOW
        )

    def failed(self, client: str) -> None:
        key = limited_as(client)
        times = self._failures.pop(key, None) or deque(maxlen=LOGIN_FAILURES_PER_CLIENT)
        times.append(self.clock())
        self._failures[key] = times  # the most recent failure last
        if len(self._failures) > MAX_CLIENTS:  # whoever evicts a count has more guesses anyway
            self._failures.popitem(last=False)


def limited_as(client: str) -> str:
    """The key a client's failures count under: its IPv4 address, or its IPv6 /64."""
    try:
        address = ipaddress.ip_address(client)
    except ValueError:
        return client  # "unknown" (no peer address): one key for all of them
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


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
    """The client's address as the server decided it: the connection's peer, or, from a proxy
    named in ``FORWARDED_ALLOW_IPS``, the address that proxy forwarded (``server_limits``)."""
    return request.client.host if request.client else "unknown"
