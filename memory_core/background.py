"""One background round-runner shared by the durable-queue workers (evaluation, extraction)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from .errors import DatabaseUnavailableError, StorageError

log = logging.getLogger(__name__)


class RoundLoop:
    """Runs ``run_round`` when woken, or every ``interval`` seconds; never dies of an error.

    The work itself is durable in the database, so a failed round is only logged: the next
    round picks it up.
    """

    def __init__(self, run_round: Callable[[], Awaitable[object]], *, interval: float, name: str):
        self._run_round = run_round
        self._interval = interval
        self._name = name
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop())
            self._wake.set()  # catch up with whatever became due while stopped

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self._interval)
            self._wake.clear()
            try:
                await self._run_round()
            except (DatabaseUnavailableError, StorageError) as exc:
                log.warning("%s postponed: %s", self._name, exc)
            except Exception:  # keep the loop alive; the queue is durable
                log.exception("%s round failed", self._name)
