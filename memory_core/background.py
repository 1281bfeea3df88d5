"""One background round-runner for every loop of the core: the durable-queue workers
(evaluation, extraction) and the memory's maintenance (reconnect, spool, backfills)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from .errors import DatabaseUnavailableError, StorageError

Failures = tuple[type[Exception], ...]

log = logging.getLogger(__name__)


class RoundLoop:
    """Runs ``run_round`` when woken, or every ``interval`` seconds; never dies of an error.

    The work itself is durable (in the database, or the spool), so a failed round is only
    logged: the next round picks it up. ``postponed`` failures (the database or a provider
    away) are logged as one warning line, ``quiet`` ones at debug level (reported once
    elsewhere), any other with its traceback. With ``rest_after_failure`` the loop waits a
    whole ``interval`` after a failed round even if woken meanwhile: during an outage every
    message wakes it, and one attempt per interval is enough.
    """

    def __init__(
        self,
        run_round: Callable[[], Awaitable[object]],
        *,
        interval: float,
        name: str,
        postponed: Failures = (DatabaseUnavailableError, StorageError),
        quiet: Failures = (),
        rest_after_failure: bool = False,
    ):
        self._run_round = run_round
        self._interval = interval
        self._name = name
        self._postponed = postponed
        self._quiet = quiet
        self._rest_after_failure = rest_after_failure
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        if self._task is None:
            self._stopping = False
            self._task = asyncio.create_task(self._loop())
            self._wake.set()  # catch up with whatever became due while stopped

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            # Also said by a flag: Python 3.11's wait_for loses a cancellation that arrives as
            # the wake it waits for does (a wake just before stop), and the loop would go on.
            self._stopping = True
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self._interval)
            if self._stopping:
                return
            self._wake.clear()
            try:
                await self._run_round()
            except Exception as exc:  # keep the loop alive; the work is durable
                self._log_failure(exc)
                if self._rest_after_failure:
                    await asyncio.sleep(self._interval)

    def _log_failure(self, exc: Exception) -> None:
        if isinstance(exc, self._postponed):
            log.warning("%s postponed: %s", self._name, exc)
        elif isinstance(exc, self._quiet):
            log.debug("%s postponed: %s", self._name, exc)
        else:
            log.error("%s round failed", self._name, exc_info=exc)


class DueFlag:
    """Work found due (a turn left unembedded, a spooled turn): set by whoever finds it, which
    wakes ``loop`` (once it runs); the loop's round clears it when it takes the work."""

    def __init__(self) -> None:
        self._due = False
        self.loop: RoundLoop | None = None

    def set(self) -> None:
        self._due = True
        if self.loop is not None:
            self.loop.wake()

    def clear(self) -> None:
        self._due = False

    def is_set(self) -> bool:
        return self._due
