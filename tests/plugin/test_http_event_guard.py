"""The HTTP event guard in-process: on the app NoneBot's FastAPI driver serves once the plugin is
loaded (as in any NoneBot project, not only through ``bot.py``), and on a small Starlette app for
what must pass untouched and for the rate of its warnings. The wire tests prove the same over a
real server with a connected client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from tests.plugin.events import SELF_ID, message_payload, text_seg
from tests.plugin.wire import EVENT_POST_PATHS


def client_for(app: Any, *, root_path: str = "") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, root_path=root_path)
    return httpx.AsyncClient(transport=transport, base_url="http://bot.test")


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    from nonebot.log import logger

    lines: list[str] = []
    sink = logger.add(lambda m: lines.append(str(m)), level="WARNING", format="{message}")
    yield lines
    logger.remove(sink)


@pytest.mark.parametrize("root_path", ["", "/bot"], ids=["direct", "behind-root-path"])
async def test_the_loaded_plugin_refuses_event_posts_on_the_drivers_app(
    plugin: Any, root_path: str
):
    import nonebot

    event = message_payload([text_seg("/remember 伪造")], user_id=20002)
    async with client_for(nonebot.get_driver().server_app, root_path=root_path) as client:
        for path in EVENT_POST_PATHS:
            response = await client.post(
                root_path + path, json=event, headers={"X-Self-ID": str(SELF_ID)}
            )
            assert response.status_code == 403, (path, response.text)
            assert "ONEBOT_SECRET" in response.text
        # Other methods on those paths are not events: they reach the router as before.
        assert (await client.get(root_path + "/onebot/v11/http")).status_code == 405


def starlette_app(*, clock: Any = None) -> tuple[Starlette, list[str]]:
    """The adapter's event routes and one more route, all recording the requests they get."""
    from nonebot_plugin_temporal_memory.guards.http_event_guard import HttpEventGuard

    reached: list[str] = []

    async def handle(request: Request) -> Response:
        reached.append(request.url.path)
        return PlainTextResponse("handled")

    routes = [Route(path, handle, methods=["POST"]) for path in EVENT_POST_PATHS]
    routes.append(Route("/webhook", handle, methods=["POST"]))
    app = Starlette(routes=routes)
    options: dict[str, Any] = {"routes": lambda: app.router.routes}
    if clock is not None:
        options["clock"] = clock
    app.add_middleware(HttpEventGuard, **options)
    return app, reached


async def test_other_routes_are_untouched_and_event_routes_never_reached(plugin: Any):
    app, reached = starlette_app()
    async with client_for(app) as client:
        assert (await client.post("/webhook", content=b"{}")).text == "handled"
        for path in EVENT_POST_PATHS:
            assert (await client.post(path, content=b"{}")).status_code == 403
        # A path one slash off is redirected to the event route, where the guard refuses it.
        redirected = await client.post("/onebot/v11", content=b"{}", follow_redirects=True)
        assert redirected.status_code == 403
    assert reached == ["/webhook"]


async def test_refusals_warn_once_a_minute_naming_onebot_secret(plugin: Any, warnings: list[str]):
    from nonebot_plugin_temporal_memory.guards.asgi_guard import WARNING_INTERVAL

    now = [1000.0]
    app, _ = starlette_app(clock=lambda: now[0])
    async with client_for(app) as client:
        for _ in range(20):
            await client.post("/onebot/v11/http", content=b"{}")
        assert len(warnings) == 1
        now[0] += WARNING_INTERVAL
        await client.post("/onebot/v11/", content=b"{}")
    assert len(warnings) == 2
    assert all("ONEBOT_SECRET" in line for line in warnings)
    assert "/onebot/v11/ " in warnings[1] and "and 19 more since the last warning" in warnings[1]
