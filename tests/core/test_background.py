"""The one background loop (``memory_core.background.RoundLoop``): how a failed round is
reported, and the rest after a failure that the memory's maintenance takes."""

from __future__ import annotations

import asyncio
import logging

import pytest

from memory_core import background
from memory_core.background import DueFlag, RoundLoop, rest_after
from memory_core.errors import DatabaseUnavailableError, EmbeddingError, StorageError

HOUR = 3600.0  # no round is ever started by the interval in these tests


class FailingRounds:
    """Each round raises the next of ``failures`` and says that it ran."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.rounds = 0
        self.ran = asyncio.Event()

    async def __call__(self) -> None:
        self.rounds += 1
        self.ran.set()
        if self.failures:
            raise self.failures.pop(0)


async def next_round(rounds: FailingRounds) -> None:
    # The loop logs a failure before it next awaits, so once the test runs again it is logged.
    await asyncio.wait_for(rounds.ran.wait(), timeout=60)
    rounds.ran.clear()
    for _ in range(5):
        await asyncio.sleep(0)


async def test_failures_are_logged_by_kind(caplog: pytest.LogCaptureFixture) -> None:
    rounds = FailingRounds(
        EmbeddingError("the embedder is away"),
        StorageError("writes refused"),
        ValueError("a bug"),
    )
    loop = RoundLoop(
        rounds,
        interval=HOUR,
        name="upkeep",
        postponed=(DatabaseUnavailableError, EmbeddingError),
        quiet=(StorageError,),
    )
    with caplog.at_level(logging.DEBUG, logger="memory_core.background"):
        loop.start()
        try:
            await next_round(rounds)
            for _ in range(2):
                loop.wake()
                await next_round(rounds)
        finally:
            await loop.stop()
    logged = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert logged[:3] == [
        (logging.WARNING, "upkeep postponed: the embedder is away"),
        (logging.DEBUG, "upkeep postponed: writes refused"),
        (logging.ERROR, "upkeep round failed"),
    ]
    assert caplog.records[2].exc_info is not None  # a bug comes with its traceback


async def test_by_default_a_storage_failure_is_a_postponement(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rounds = FailingRounds(StorageError("writes refused"))
    loop = RoundLoop(rounds, interval=HOUR, name="memory evaluation")
    with caplog.at_level(logging.DEBUG, logger="memory_core.background"):
        loop.start()
        try:
            await next_round(rounds)
        finally:
            await loop.stop()
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "memory evaluation postponed: writes refused")
    ]


async def test_after_a_failure_the_loop_rests_even_when_woken() -> None:
    resting = FailingRounds(DatabaseUnavailableError("down"))
    loop = RoundLoop(resting, interval=HOUR, name="upkeep", rest_after_failure=True)
    eager = FailingRounds(DatabaseUnavailableError("down"))
    other = RoundLoop(eager, interval=HOUR, name="workers")
    loop.start()
    other.start()
    try:
        await next_round(resting)
        await next_round(eager)
        loop.wake()
        other.wake()
        await next_round(eager)  # the loop without a rest runs again at once
        for _ in range(20):
            await asyncio.sleep(0)
        assert (resting.rounds, eager.rounds) == (1, 2)
    finally:
        await loop.stop()
        await other.stop()


async def test_setting_a_due_flag_wakes_its_loop() -> None:
    rounds = FailingRounds()
    loop = RoundLoop(rounds, interval=HOUR, name="upkeep")
    due = DueFlag()
    due.set()  # before the loop runs: only remembered
    assert due.is_set()
    due.loop = loop
    loop.start()
    try:
        await next_round(rounds)
        due.clear()
        due.set()
        await next_round(rounds)
        assert rounds.rounds == 2 and due.is_set()
    finally:
        await loop.stop()


async def test_a_loop_woken_just_before_it_is_stopped_stops() -> None:
    rounds = FailingRounds()
    loop = RoundLoop(rounds, interval=HOUR, name="upkeep")
    loop.start()
    await next_round(rounds)
    loop.wake()
    await asyncio.wait_for(loop.stop(), timeout=60)
    assert rounds.rounds == 1


def test_the_rest_after_failures_in_a_row_doubles_from_a_second_up_to_the_interval() -> None:
    assert [rest_after(n, 30.0) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    assert rest_after(10_000, 30.0) == 30.0


async def test_after_its_rest_a_failed_round_is_tried_again_without_being_woken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The database back after a blip is taken up after the short rest, not an interval (or a
    message) later; once a round succeeds the loop waits for its interval again."""
    monkeypatch.setattr(background, "FIRST_REST", 0.01)
    rounds = FailingRounds(DatabaseUnavailableError("down"), DatabaseUnavailableError("down"))
    loop = RoundLoop(rounds, interval=HOUR, name="upkeep", rest_after_failure=True)
    loop.start()
    try:
        for _ in range(3):  # two failures, then a round that works
            await next_round(rounds)
        for _ in range(20):
            await asyncio.sleep(0)
        assert rounds.rounds == 3 and not rounds.failures
    finally:
        await loop.stop()
