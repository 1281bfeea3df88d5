"""Where one message's time goes: named stages, wall and CPU, when MEMORY_STAGE_TIMES is on.

A diagnostic for the bot's own latency (``bench.bot_throughput`` prints it). The plugin's chat
handler (or ``ConversationEngine.converse``, whichever comes first) runs the message
``clocked``, on a :class:`StageClock` of its own; code on the message's path wraps a step in
``with stage("name"):``, which costs nothing when no clock runs. The clock lives in a context
variable, so the tasks a message's steps run in (``asyncio.gather``) add to the same clock;
stages that run at once overlap, and so do their figures. CPU is the event loop thread's
(``time.thread_time``): what other tasks did on it meanwhile counts too, so with one user it
is the message's own.

After the reply the engine adds every stage's microseconds to the daily counters
(``stage_<name>_us`` wall, ``stage_<name>_cpu_us`` CPU, ``stage_messages`` how many), in the
round trip that counts the recall time already; nothing is logged per message.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

STAGE_MESSAGES = "stage_messages"
WHOLE = "whole"  # from the clock's start to the counting after the reply


class StageClock:
    """One message's stages: name -> summed wall and CPU seconds."""

    __slots__ = ("_cpu_started", "_started", "cpu", "wall")

    def __init__(self) -> None:
        self._started = time.perf_counter()
        self._cpu_started = time.thread_time()
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def add(self, name: str, wall: float, cpu: float) -> None:
        self.wall[name] = self.wall.get(name, 0.0) + wall
        self.cpu[name] = self.cpu.get(name, 0.0) + cpu

    def metrics(self) -> dict[str, int]:
        """The daily counters of this message, the whole span up to now included."""
        self.add(
            WHOLE,
            time.perf_counter() - self._started,
            time.thread_time() - self._cpu_started,
        )
        counted = {STAGE_MESSAGES: 1}
        for name, seconds in self.wall.items():
            counted[f"stage_{name}_us"] = round(seconds * 1e6)
            counted[f"stage_{name}_cpu_us"] = round(self.cpu[name] * 1e6)
        return counted


_clock: ContextVar[StageClock | None] = ContextVar("stage_clock", default=None)


@contextmanager
def clocked(on: bool = True) -> Iterator[None]:
    """Time the message handled in the block (and the tasks it starts) on a clock of its own,
    when ``on`` and no clock runs already (the chat handler's, which the engine continues)."""
    if not on or _clock.get() is not None:
        yield
        return
    token = _clock.set(StageClock())
    try:
        yield
    finally:
        _clock.reset(token)


def current_clock() -> StageClock | None:
    return _clock.get()


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Time the block as stage ``name`` of the running clock, if one runs."""
    clock = _clock.get()
    if clock is None:
        yield
        return
    wall, cpu = time.perf_counter(), time.thread_time()
    try:
        yield
    finally:
        clock.add(name, time.perf_counter() - wall, time.thread_time() - cpu)
