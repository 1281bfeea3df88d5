"""The memory over MCP (streamable HTTP) at ``/mcp`` on the bot's own port (``MEMORY_MCP_TOKEN``).

Routed on NoneBot's FastAPI app while the plugin loads, and only when a token is set: without
one the path does not exist. Every request must carry ``Authorization: Bearer <token>``
(compared in constant time) or is answered 401 before the SDK sees it. The bodies are bounded
like every other body of the app (``body_limit`` sits on the whole app; the SDK's own limit is
set to the same bytes). The tools are ``memory_core.agents.mcp_server``'s, over the bot's running
memory and conversation engine, so a note remembered here is kept in order with the chat;
``MEMORY_MCP_READONLY=true`` serves no ``remember`` or ``forget``.

Stateless, answered as plain JSON (``agents.mcp_server.http_sessions`` says why).
"""

from __future__ import annotations

import asyncio
import hmac
from typing import TYPE_CHECKING

from nonebot import get_driver, get_plugin_config
from nonebot.drivers import ASGIMixin, Driver
from nonebot.log import logger
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .config import Config
from .guards.body_limit import MAX_REQUEST_BYTES
from .listener import is_loopback
from .runtime import get_runtime
from .startup_checks import MIN_MCP_TOKEN_CHARS

if TYPE_CHECKING:  # the MCP SDK (~25 MB) is imported only when /mcp is served (``start``)
    from memory_core.agents import AgentMemory, HttpSessions

MCP_PATH = "/mcp"
ACTOR = "mcp:http"
UNAUTHORIZED = "需要 Authorization: Bearer <MEMORY_MCP_TOKEN> / bearer token required\n"

driver = get_driver()


def bearer_matches(scope: Scope, expected: bytes) -> bool:
    """Whether the request's ``Authorization`` header is exactly ``expected``, compared in
    constant time (a missing header compares as empty)."""
    given = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
    return hmac.compare_digest(given, expected)


class McpEndpoint:
    """The ASGI app at ``/mcp``: the bearer check, then the SDK's handler, which ``start``
    runs in a task of its own from the bot's start-up to its shutdown (``stop``)."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode("ascii")
        self._manager: HttpSessions | None = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.readonly = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not bearer_matches(scope, self._expected):
            refusal = PlainTextResponse(
                UNAUTHORIZED, status_code=401, headers={"WWW-Authenticate": "Bearer"}
            )
            await refusal(scope, receive, send)
            return
        if self._manager is None or not self._ready.is_set():
            await PlainTextResponse("MCP is not started\n", status_code=503)(scope, receive, send)
            return
        await self._manager.handle_request(scope, receive, send)

    async def start(self, *, readonly: bool) -> None:
        """Build the tools over the bot's runtime and run the SDK's manager in a task of its
        own (the manager's task group must be entered and left by one task)."""
        from memory_core.agents import AgentMemory, http_sessions

        self.readonly = readonly
        memory: list[AgentMemory] = []

        def source() -> AgentMemory:
            if not memory:
                runtime = get_runtime()
                memory.append(AgentMemory(runtime.memory.parts, runtime.engine, ACTOR))
            return memory[0]

        self._manager = http_sessions(
            source, readonly=readonly, path=MCP_PATH, max_body_bytes=MAX_REQUEST_BYTES
        )
        self._task = asyncio.create_task(self._serve(self._manager))
        await self._ready.wait()

    async def _serve(self, manager: HttpSessions) -> None:
        async with manager.run():
            self._ready.set()
            await self._stop.wait()

    async def stop(self) -> None:
        if self._task is None:
            return
        self._ready.clear()  # requests from now on get the 503, not a stopped manager
        self._stop.set()
        await self._task
        self._task = None


class _State:
    endpoint: McpEndpoint | None = None


def install_mcp(driver: Driver) -> McpEndpoint | None:
    """Route ``/mcp`` when a long enough token is set (a shorter one ends the start-up:
    ``startup_checks.check_mcp_token``); the endpoint, or ``None``."""
    try:
        config = get_plugin_config(Config)
    except ValidationError:
        return None  # refused in one line at start-up (runtime.checked_configuration)
    token = config.memory_mcp_token.get_secret_value() if config.memory_mcp_token else ""
    if len(token) < MIN_MCP_TOKEN_CHARS or not token.isascii():
        return None
    if not isinstance(driver, ASGIMixin) or not isinstance(driver.server_app, Starlette):
        logger.warning(
            "TemporalMemory MCP: off (the driver serves no FastAPI app; DRIVER=~fastapi)"
        )
        return None
    endpoint = McpEndpoint(token)
    driver.server_app.router.routes.append(Route(MCP_PATH, endpoint=endpoint))
    return endpoint


@driver.on_startup
async def _start() -> None:
    # After the runtime's own start-up hook (registered when ``runtime`` was imported).
    endpoint = _State.endpoint
    if endpoint is None:
        logger.info("TemporalMemory MCP: off (MEMORY_MCP_TOKEN is empty)")
        return
    await endpoint.start(readonly=get_runtime().settings.memory_mcp_readonly)
    host, port = driver.config.host, driver.config.port
    shown = f"[{host}]" if ":" in str(host) else str(host)
    tools = "recall (read-only)" if endpoint.readonly else "recall, remember, forget"
    logger.info(
        f"TemporalMemory MCP: http://{shown}:{port}{MCP_PATH} (streamable HTTP, "
        f"Authorization: Bearer MEMORY_MCP_TOKEN; tools: {tools})"
    )
    if not is_loopback(host):
        logger.warning(
            "TemporalMemory MCP: HOST is reachable from other machines and /mcp is plain HTTP, "
            "its token readable on the way; put it behind HTTPS (a reverse proxy) or an SSH tunnel"
        )


@driver.on_shutdown
async def _stop() -> None:
    if _State.endpoint is not None:
        await _State.endpoint.stop()


_State.endpoint = install_mcp(driver)
