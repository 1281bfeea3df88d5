"""Whether the bot is answering anyone: background work that can wait (reading pictures) waits
for a quiet moment, so a busy chat puts the work off rather than slowing its replies.

``ReplyTraffic.replying()`` wraps each reply (``ConversationEngine.converse``, from the message
taken to the reply stored); :meth:`ReplyTraffic.quiet_by` waits until no reply has been under
way for ``gap`` seconds, or a deadline, whichever comes first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# How long no reply must have been under way for the bot to count as quiet.
QUIET_GAP = 1.0


class ReplyTraffic:
    """How many replies are under way, and when the last one ended."""

    def __init__(self, gap: float = QUIET_GAP, clock: Callable[[], float] = time.monotonic):
        self._gap = gap
        self._clock = clock
        self._active = 0
        self._ended = float("-inf")
        self._idle = asyncio.Event()
        self._idle.set()

    def now(self) -> float:
        """This object's clock (deadlines are on it)."""
        return self._clock()

    @property
    def active(self) -> int:
        return self._active

    @contextmanager
    def replying(self) -> Iterator[None]:
        """Count the block as a reply under way."""
        self._active += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._active -= 1
            self._ended = self._clock()
            if self._active == 0:
                self._idle.set()

    def quiet(self) -> bool:
        """No reply under way now, nor in the last ``gap`` seconds."""
        return self._active == 0 and self._clock() - self._ended >= self._gap

    async def quiet_by(self, deadline: float) -> bool:
        """Wait until :meth:`quiet` or the ``deadline`` (on this object's clock) has passed;
        whether it is quiet."""
        while not self.quiet():
            left = deadline - self._clock()
            if left <= 0:
                return False
            if self._active:
                try:
                    await asyncio.wait_for(self._idle.wait(), left)
                except asyncio.TimeoutError:
                    return False
            else:
                await asyncio.sleep(min(left, self._gap - (self._clock() - self._ended)))
        return True
