"""One background round-runner for every loop of the core: the durable-queue workers
(evaluation, extraction) and the memory's maintenance (reconnect, spool, backfills), and the
steps that maintenance runs (daily: the purge of expired rows, the distilled upkeep; every
minute: the picture reader's retries): the core owns time, whatever front end (the bot,
``python -m memory_core mcp``) opened the memory."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, time, timedelta, timezone, tzinfo

from .errors import DatabaseUnavailableError, MemoryCoreError, StorageError

Failures = tuple[type[Exception], ...]

log = logging.getLogger(__name__)


# After a failed round a resting loop waits FIRST_REST, twice as long after each further failure
# in a row, up to its interval: a database back after a blip (a restart, a failover) is taken
# up within seconds, not an interval later (30 s for the maintenance, every message meanwhile
# answered without memory), and a long outage still costs one attempt (one log line) an
# interval.
FIRST_REST = 1.0


def rest_after(failures: int, interval: float) -> float:
    """The rest after the ``failures``-th failed round in a row (``failures`` >= 1)."""
    return min(interval, FIRST_REST * 2.0 ** min(failures - 1, 32))


class RoundLoop:
    """Runs ``run_round`` when woken, or every ``interval`` seconds; never dies of an error.

    The work itself is durable (in the database, or the spool), so a failed round is only
    logged: the next round picks it up. ``postponed`` failures (the database or a provider
    away) are logged as one warning line, ``quiet`` ones at debug level (reported once
    elsewhere), any other with its traceback. With ``rest_after_failure`` the loop rests after
    a failed round even if woken meanwhile (during an outage every message wakes it), then
    tries again: ``FIRST_REST``, doubled after each further failure in a row, up to
    ``interval``.
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
        self._failures = 0  # failed rounds in a row
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
                self._failures += 1
                if self._rest_after_failure:
                    await asyncio.sleep(rest_after(self._failures, self._interval))
                    self._wake.set()  # its work is still due: tried again after the rest
            else:
                self._failures = 0

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


# A daily step that failed (the database or a provider away) is tried again this much later,
# not every round.
STEP_RETRY = timedelta(minutes=15)


@dataclass(frozen=True)
class DailyStep:
    """A named step of the maintenance round, due once a day at a local wall time ``at``;
    with ``on_start`` also at the first round after start (a day missed while stopped)."""

    name: str
    run: Callable[[], Awaitable[object]]
    at: time
    on_start: bool = False


@dataclass(frozen=True)
class RepeatedStep:
    """A named step of the maintenance round, due at the first round after start and then
    ``every`` after it last ran (at the first round after that: rounds come at least every
    maintenance interval)."""

    name: str
    run: Callable[[], Awaitable[object]]
    every: timedelta


Step = DailyStep | RepeatedStep


class DailySchedule:
    """When each step is next due, in zone ``tz``. The maintenance round calls
    :meth:`run_due` (a test calls it with the moment it pretends it is: no timer to race).
    A late round runs a step once, however many of its times it missed."""

    def __init__(self, steps: Sequence[Step], tz: tzinfo, now: datetime | None = None) -> None:
        self._steps: list[Step] = []
        self._tz = tz
        self._next: dict[str, datetime] = {}
        for step in steps:
            self.add(step, now)

    def add(self, step: Step, now: datetime | None = None) -> None:
        """One more step: a part built after the memory adds its own (the picture reader's
        retries, ``open_chat_bot``)."""
        now = now or datetime.now(timezone.utc)
        first = isinstance(step, RepeatedStep) or step.on_start
        self._steps.append(step)
        self._next[step.name] = now if first else self._following(step, now)

    def _following(self, step: Step, now: datetime) -> datetime:
        """The first ``step.at`` after ``now``; a repeated step's next time."""
        if isinstance(step, RepeatedStep):
            return now + step.every
        local = now.astimezone(self._tz)
        at = datetime.combine(local.date(), step.at, tzinfo=self._tz)
        if at <= local:
            at = datetime.combine(local.date() + timedelta(days=1), step.at, tzinfo=self._tz)
        return at

    def next_run(self, name: str) -> datetime:
        return self._next[name]

    async def run_due(self, now: datetime | None = None) -> list[str]:
        """Run every step due at ``now`` (default: the clock), in order; the names that ran.
        A step that fails is logged and tried again ``STEP_RETRY`` later; the others run."""
        now = now or datetime.now(timezone.utc)
        ran = []
        for step in tuple(self._steps):
            if self._next[step.name] > now:
                continue
            try:
                await step.run()
            except MemoryCoreError as exc:
                log.warning("%s postponed: %s", step.name, exc)
                self._next[step.name] = now + _retry_after(step)
                continue
            except Exception as exc:
                log.error("%s failed", step.name, exc_info=exc)
                self._next[step.name] = now + _retry_after(step)
                continue
            self._next[step.name] = self._following(step, now)
            ran.append(step.name)
        return ran


def _retry_after(step: Step) -> timedelta:
    """How long after a failure a step is tried again: a repeated step at its next time."""
    return min(step.every, STEP_RETRY) if isinstance(step, RepeatedStep) else STEP_RETRY
