"""Request bodies are bounded before they are read: in-process (how much of a body the app pulls)
and over the real bot's port, on the console's login form that needs no session."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from tests.plugin.console_bot import CONSOLE_TOKEN, ConsoleBot, same_origin

CHUNK = 64 * 1024


def reading_app() -> Starlette:
    async def echo_size(request: Request) -> Response:
        return PlainTextResponse(str(len(await request.body())))

    return Starlette(routes=[Route("/form", echo_size, methods=["POST"])])


async def call(app: Any, *, length: int | None, chunks: int) -> tuple[int, int]:
    """POST ``chunks`` chunks of ``CHUNK`` bytes (declaring ``length`` if given); the response
    status and how many bytes the app pulled from the client."""
    headers = [(b"content-type", b"application/x-www-form-urlencoded")]
    if length is not None:
        headers.append((b"content-length", str(length).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/form",
        "raw_path": b"/form",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
    }
    pulled = 0
    sent = 0
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        nonlocal pulled, sent
        sent += 1
        pulled += CHUNK
        return {"type": "http.request", "body": b"a" * CHUNK, "more_body": sent < chunks}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    await app(scope, receive, send)
    return statuses[0], pulled


async def test_a_declared_oversized_body_is_refused_without_reading_any_of_it(plugin: Any):
    from nonebot_plugin_temporal_memory.guards.body_limit import MAX_REQUEST_BYTES, RequestBodyLimit

    app = RequestBodyLimit(reading_app())
    status, pulled = await call(app, length=200 * 1024 * 1024, chunks=3200)
    assert status == 413
    assert pulled == 0
    assert MAX_REQUEST_BYTES < 200 * 1024 * 1024


async def test_a_body_sent_without_a_length_is_cut_off_once_it_passes_the_limit(plugin: Any):
    from nonebot_plugin_temporal_memory.guards.body_limit import RequestBodyLimit

    app = RequestBodyLimit(reading_app(), limit=1024 * 1024)
    status, pulled = await call(app, length=None, chunks=3200)  # 200 MB if read to the end
    assert status == 413
    assert pulled <= 1024 * 1024 + CHUNK


async def test_a_body_within_the_limit_reaches_the_app_whole(plugin: Any):
    from nonebot_plugin_temporal_memory.guards.body_limit import RequestBodyLimit

    app = RequestBodyLimit(reading_app(), limit=1024 * 1024)
    assert await call(app, length=4 * CHUNK, chunks=4) == (200, 4 * CHUNK)
    assert await call(app, length=None, chunks=4) == (200, 4 * CHUNK)


async def test_the_loaded_plugin_bounds_the_drivers_whole_app(plugin: Any):
    import nonebot

    from nonebot_plugin_temporal_memory.guards.body_limit import RequestBodyLimit

    app = nonebot.get_driver().server_app
    assert any(m.cls is RequestBodyLimit for m in app.user_middleware)


async def test_the_console_login_refuses_oversized_bodies_and_still_logs_in(
    console_wire: ConsoleBot,
):
    async def stream(total: int) -> AsyncIterator[bytes]:
        yield b"token="
        for _ in range(total // CHUNK):
            yield b"a" * CHUNK

    async with console_wire.client() as client:
        client.headers.update(same_origin(console_wire))
        declared = await client.post(
            "/memory/login",
            content=b"token=" + b"a" * (3 * 1024 * 1024),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert declared.status_code == 413
        streamed = await client.post(
            "/memory/login",
            content=stream(8 * 1024 * 1024),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert streamed.status_code == 413
        answer = await client.post("/memory/login", data={"token": CONSOLE_TOKEN})
        assert answer.status_code == 303
    assert "Traceback" not in console_wire.bot.log_text()
