"""The short-term window that moves in steps, so that consecutive prompts share a prefix.

A provider's prefix cache (DeepSeek, OpenAI, Qwen, SiliconFlow bill cached input at a fraction)
only reuses a prompt up to its first changed character. A window of "the last N turns" drops its
oldest turn at every message and so changes the prompt right after the system prompt each time.
Here the window has a start: it grows by appending until it would hold more than
``preparation.RECENT_GROWTH`` (3) times CHAT_RECENT_TURNS turns, then drops all but the last
CHAT_RECENT_TURNS at once and grows again. So the model never sees fewer recent turns than the
setting asks for, and the turns beyond it cost little: they are the part of the prompt the
provider has cached. Only a step sends the window's turns uncached again, once per
(growth - 1) × CHAT_RECENT_TURNS turns: a bigger growth steps less often (fewer turns billed
uncached per message) for a longer cached prefix (more turns billed at the cached price).
Turns older than CHAT_RECENT_MINUTES still leave it as before (``PromptPreparer``), so a pause
can shorten it. In a group the window is the group's (CHAT_GROUP_WINDOW): one start for all
its members.

The starts live in this process only; after a restart a session's window starts again at the
turns read (at most RECENT_GROWTH times CHAT_RECENT_TURNS).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime

from ..context.block import time_key
from ..models import MemoryTurn

MAX_SESSIONS = 4096  # starts remembered; the least recently used are forgotten first


class SteppedWindow:
    """Which of a session's short-term turns its next prompt shows (see the module docstring)."""

    def __init__(self, least: int, *, growth: int = 2, max_sessions: int = MAX_SESSIONS) -> None:
        self._least = least
        self.capacity = growth * least  # how many turns to read for ``shown``
        self._max_sessions = max_sessions
        self._starts: OrderedDict[str, tuple[datetime, int]] = OrderedDict()

    def shown(
        self, session_key: str, turns: Sequence[MemoryTurn], *, remember: bool = True
    ) -> list[MemoryTurn]:
        """The turns to show, oldest first, out of ``turns``: the session's newest
        short-term turns, at most ``capacity`` of them (more than that were not read).
        ``remember=False``: a look (the console's debugger) that does not move the window."""
        ordered = sorted(turns, key=time_key)
        if not ordered:
            self._starts.pop(session_key, None)
            return []
        start = self._starts.get(session_key)
        # The window overflowed when its first turn is no longer among the newest ``capacity``.
        overflowed = (
            start is not None and len(ordered) >= self.capacity and time_key(ordered[0]) > start
        )
        if start is None:
            shown = ordered
        elif overflowed:
            shown = ordered[-self._least :]
        else:
            # ``or ordered``: the window's turns were forgotten (``/forget``); start afresh
            shown = [t for t in ordered if time_key(t) >= start] or ordered
        if remember:
            self._remember(session_key, time_key(shown[0]))
        return shown

    def _remember(self, session_key: str, start: tuple[datetime, int]) -> None:
        self._starts[session_key] = start
        self._starts.move_to_end(session_key)
        while len(self._starts) > self._max_sessions:
            self._starts.popitem(last=False)
