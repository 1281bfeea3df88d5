"""The memory for other agents: the operations they may call (``memory.AgentMemory``: recall,
remember, forget, each a chat command's, and find_people) and their MCP server
(``mcp_server``: stdio here, the bot's ``/mcp`` in the plugin's ``mcp_http``)."""

from .mcp_server import HttpSessions, http_sessions
from .memory import AgentMemory

__all__ = ["AgentMemory", "HttpSessions", "http_sessions"]
