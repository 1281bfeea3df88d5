"""The WebSocket access guard in-process, on a small Starlette app with the adapter's WebSocket
routes and a clock the test moves: what it refuses, what it lets pass, and how often it says
so per address. ``test_wire_access`` proves the same on the real bot over real sockets."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket

TOKEN = "3f9c2a71be04d5e8"


@pytest.fixture
def warnings(plugin: Any) -> Iterator[list[str]]:
    from nonebot.log import logger

    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING", format="{message}")
    yield lines
    logger.remove(sink)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def guarded_app(clock: Clock, *, token: str | None = TOKEN) -> tuple[Any, list[str]]:
    from nonebot_plugin_temporal_memory.guards.ws_access_guard import WebSocketAccessGuard
    from nonebot_plugin_temporal_memory.guards.ws_frame_guard import WS_PATHS

    accepted: list[str] = []

    async def endpoint(websocket: WebSocket) -> None:
        accepted.append(websocket.url.path)
        await websocket.accept()
        await websocket.close()

    app = Starlette(routes=[WebSocketRoute(path, endpoint) for path in sorted(WS_PATHS)])
    app.add_middleware(
        WebSocketAccessGuard, routes=lambda: app.router.routes, access_token=token, clock=clock
    )
    return app, accepted


async def handshake(
    app: Any, *, path: str = "/onebot/v11/ws", client: str = "10.0.0.7", auth: str | None
) -> str:
    """The first message the app sends for a handshake: ``websocket.accept`` or ``.close``."""
    headers = [(b"x-self-id", b"123")]
    if auth is not None:
        headers.append((b"authorization", auth.encode("latin-1")))
    scope = {
        "type": "websocket",
        "asgi": {"version": "3.0"},
        "scheme": "ws",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": (client, 50000),
        "server": ("127.0.0.1", 8080),
        "subprotocols": [],
        "state": {},
    }
    incoming = [{"type": "websocket.connect"}, {"type": "websocket.disconnect", "code": 1000}]
    sent: list[str] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "websocket.disconnect", "code": 1000}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message["type"])

    await app(scope, receive, send)
    return sent[0]


async def test_the_right_token_in_either_scheme_reaches_the_adapter(warnings: list[str]):
    app, accepted = guarded_app(Clock())
    assert await handshake(app, auth=f"Bearer {TOKEN}") == "websocket.accept"
    assert await handshake(app, auth=f"Token {TOKEN}", path="/onebot/v11/") == "websocket.accept"
    assert accepted == ["/onebot/v11/ws", "/onebot/v11/"] and warnings == []


async def test_without_an_access_token_nothing_is_checked(warnings: list[str]):
    app, accepted = guarded_app(Clock(), token=None)
    assert await handshake(app, auth=None) == "websocket.accept"
    assert accepted == ["/onebot/v11/ws"] and warnings == []


@pytest.mark.parametrize(
    ("auth", "cause"),
    [
        (None, "no token sent"),
        ("", "no token sent"),
        ("Bearer nope-nope-nope", "wrong token"),
        (TOKEN, "not 'Bearer <token>'"),
    ],
    ids=["absent", "empty", "wrong", "no-scheme"],
)
async def test_a_token_the_adapter_would_refuse_is_refused_naming_the_cause(
    warnings: list[str], auth: str | None, cause: str
):
    app, accepted = guarded_app(Clock())
    assert await handshake(app, auth=auth) == "websocket.close"
    assert accepted == []
    [line] = warnings
    assert "from 10.0.0.7 to /onebot/v11/ws" in line and cause in line and TOKEN not in line


async def test_a_path_without_ws_is_logged_with_the_address_to_use(warnings: list[str]):
    app, _ = guarded_app(Clock())
    assert await handshake(app, path="/onebot/v11", auth=f"Bearer {TOKEN}") == "websocket.close"
    [line] = warnings
    assert "to /onebot/v11: " in line and "must end in /onebot/v11/ws" in line


async def test_one_line_a_minute_per_address_then_a_count_of_the_others(warnings: list[str]):
    from nonebot_plugin_temporal_memory.guards.asgi_guard import WARNING_INTERVAL

    clock = Clock()
    app, _ = guarded_app(clock)
    for _ in range(5):
        await handshake(app, auth="Bearer wrong", client="10.0.0.7")
    await handshake(app, auth=None, client="10.0.0.8")  # another address has its own minute
    assert len(warnings) == 2
    assert "from 10.0.0.7 " in warnings[0] and "from 10.0.0.8 " in warnings[1]
    clock.now += WARNING_INTERVAL
    await handshake(app, auth="Bearer wrong", client="10.0.0.7")
    assert len(warnings) == 3
    assert "from 10.0.0.7 " in warnings[2] and "(4 more refused from there" in warnings[2]


def test_many_addresses_share_one_throttle_past_the_limit(plugin: Any):
    from nonebot_plugin_temporal_memory.guards.asgi_guard import WARNING_INTERVAL, AddressThrottle

    clock = Clock()
    throttle = AddressThrottle(clock)
    limit = AddressThrottle.MAX_ADDRESSES
    assert all(throttle.due(f"10.1.{i // 256}.{i % 256}") == 0 for i in range(limit))
    # Full, and every minute still running: the newcomers share one line a minute.
    assert throttle.due("10.9.0.1") == 0
    assert throttle.due("10.9.0.2") is None
    # Once the minutes are over, the quiet addresses are forgotten and newcomers get their own.
    clock.now += WARNING_INTERVAL
    assert throttle.due("10.9.0.3") == 0 and throttle.due("10.9.0.4") == 0
