"""The memory served over MCP (the official ``mcp`` SDK): ``find_people``, ``recall``,
``remember``, ``forget``.

``build_server`` makes the SDK's server with the tools of ``agents.memory`` (``find_people`` and
``recall`` alone when read-only: the others are neither listed nor callable). Two transports use
it:

* stdio, ``python -m memory_core mcp`` (``serve_stdio``): a local agent starts this process and
  talks to it over its standard input and output; the memory opens inside the transport, so
  nothing the embedded PostgreSQL or a library prints reaches the agent's wire;
* streamable HTTP at ``/mcp`` on the bot's own port, behind its bearer token (the plugin's
  ``mcp_http``, which hands in the bot's running memory and engine).

A refused call (bad arguments, an opted-out person, the database away) is a tool error whose
text says why, never a crash of the server.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from importlib import metadata
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations

from ..conversation.engine import ConversationEngine
from ..errors import MemoryCoreError
from ..settings import MemorySettings
from ..wiring import open_memory
from .memory import FOUND_CHATS, RECALL_ITEMS, AgentMemory

log = logging.getLogger(__name__)

SERVER_NAME = "temporal-memory"
INSTRUCTIONS = (
    "Long-term, time-aware memory of a QQ chat bot. A chat is a person (user_id, a QQ number) "
    "in a group (group_id) or, without group_id, their private chat with the bot; every tool "
    "acts on that one chat only. find_people gives the user_id and group_id of a person "
    "known by name; recall lists what is remembered about a query there; remember stores a "
    "note as the person's own words there; forget deletes their memory there (all of it, or "
    "the facts named by the ids recall lists)."
)
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
ADDS = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
DELETES = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)

AgentMemorySource = Callable[[], AgentMemory]
"""Where a tool call finds the memory: the bot's running one, or the one ``serve_stdio`` opened."""


@asynccontextmanager
async def _answering() -> AsyncIterator[None]:
    """A refusal or a memory error becomes a tool error the agent reads (with why)."""
    try:
        yield
    except MemoryCoreError as exc:
        raise ToolError(str(exc)) from exc


def _version() -> str:
    """The installed distribution's version, named to the agent (``serverInfo``)."""
    try:
        return metadata.version("temporal-memory")
    except metadata.PackageNotFoundError:
        return ""


@contextmanager
def _root_logging_kept() -> Iterator[None]:
    """The SDK's server calls ``logging.basicConfig`` when made: in the bot, whose root logger
    has no handler (NoneBot logs through loguru), that would print every library's records a
    second time. The root logger is left as it was."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def build_server(source: AgentMemorySource, *, readonly: bool, **options: Any) -> MCPServer:
    """The SDK server with the memory's tools; ``options`` go to ``MCPServer`` (a lifespan)."""
    with _root_logging_kept():
        server: MCPServer = MCPServer(
            SERVER_NAME, instructions=INSTRUCTIONS, version=_version(), **options
        )

    async def recall(
        user_id: int, query: str, group_id: int | None = None, top_n: int | None = None
    ) -> dict[str, Any]:
        async with _answering():
            return await source().recall(user_id, query, group_id, top_n)

    async def remember(
        user_id: int, text: str, group_id: int | None = None, name: str | None = None
    ) -> dict[str, Any]:
        async with _answering():
            return await source().remember(user_id, text, group_id, name)

    async def find_people(text: str) -> dict[str, Any]:
        async with _answering():
            return await source().find_people(text)

    async def forget(
        user_id: int, group_id: int | None = None, ids: list[int] | None = None
    ) -> dict[str, Any]:
        async with _answering():
            return await source().forget(user_id, group_id, ids)

    server.add_tool(
        find_people,
        description=(
            "The people whose name (the QQ nickname or group card their newest message "
            "carries) contains `text`, each in one chat: user_id and group_id (none: their "
            "private chat with the bot) for the other tools, the name, and last_seen. At most "
            f"{FOUND_CHATS}, last seen first. Group names are not stored: find a group through "
            "a member's name."
        ),
        annotations=READ_ONLY,
    )
    server.add_tool(
        recall,
        description=(
            "What is remembered about `query` in one chat (user_id, and group_id for a group; "
            "none for the private chat): the dialogue lines the bot's prompt would carry for "
            "that message (best match first, nothing when none is about it), or with top_n at "
            f"most that many relevant turns; and the relevant facts and preferences (at most "
            f"{RECALL_ITEMS}), each with its id. The same list as the chat command /recall."
        ),
        annotations=READ_ONLY,
    )
    if readonly:
        return server
    server.add_tool(
        remember,
        description=(
            "Store `text` (at most 500 characters) as a note said by user_id in that chat "
            "(group_id, or none for the private chat), recalled later like anything they said. "
            "The chat command /remember. Stored under `name` (their name there), by default "
            "the name they were last seen under in that chat. A text they already said there "
            "is not stored again: duplicate is true and id is that turn's. Refused for a "
            "person who opted out of memory there."
        ),
        annotations=ADDS,
    )
    server.add_tool(
        forget,
        description=(
            "Delete memory of user_id in that chat (group_id, or none for the private chat): "
            "without ids everything stored of them there (the chat command /forget); with ids "
            "those facts or preferences (ids from recall's facts) and the turns they came from. "
            "Cannot be undone. Returns what went, by kind."
        ),
        annotations=DELETES,
    )
    return server


HttpSessions = StreamableHTTPSessionManager
"""The SDK's handler of streamable-HTTP requests (``handle_request``), live inside ``run()``."""


def http_sessions(
    source: AgentMemorySource, *, readonly: bool, path: str, max_body_bytes: int
) -> HttpSessions:
    """The tools over streamable HTTP at ``path`` (the caller routes it and checks who may
    call): stateless (each POST stands alone, nothing is kept per client, no session can be
    taken over) and answered as plain JSON (a tool call is one short answer), bodies bounded
    at ``max_body_bytes``. The SDK's DNS-rebinding check (an allowed-``Host`` list) is off: the
    caller's bearer token is what a page in a browser cannot send, and the list would refuse
    the bot's own name behind a reverse proxy."""
    server = build_server(source, readonly=readonly)
    server.streamable_http_app(
        streamable_http_path=path,
        stateless_http=True,
        json_response=True,
        max_request_body_size=max_body_bytes,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return server.session_manager


async def serve_stdio(settings: MemorySettings) -> None:
    """Serve the memory over stdio until the agent closes the stream (``python -m memory_core
    mcp``); read-only with ``MEMORY_MCP_READONLY``."""
    opened: list[AgentMemory] = []

    def source() -> AgentMemory:
        return opened[0]

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[None]:
        memory = await open_memory(settings)
        opened.append(
            AgentMemory(
                parts=memory.parts,
                engine=ConversationEngine(parts=memory.parts, chat_model=None),
                actor="mcp:stdio",
            )
        )
        log.info("memory served over MCP stdio (read-only: %s)", settings.memory_mcp_readonly)
        try:
            yield
        finally:
            opened.clear()
            await memory.aclose()

    server = build_server(source, readonly=settings.memory_mcp_readonly, lifespan=lifespan)
    await server.run_stdio_async()
