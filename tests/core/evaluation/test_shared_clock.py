"""Leases are kept by the database's clock: a bot whose own clock runs ahead of the others by
more than the lease neither scores an exchange another bot holds nor distils a session another
bot is distilling."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from memory_core.distill.store import PgDistilledStore
from memory_core.evaluation.store import CLAIM_LEASE
from memory_core.models import TurnInput
from tests.core.distill.test_extraction import distiller
from tests.core.distill.test_extraction import llm_settings as extraction_settings
from tests.core.evaluation.test_evaluation import exchange, judge, llm_settings

__all__ = ["distiller", "judge"]  # the fixtures, used here by name

SKEW = CLAIM_LEASE + timedelta(minutes=5)


async def lease(memory, sql: str) -> None:
    async with memory.parts.database.pool.acquire() as conn:
        assert await conn.execute(sql, CLAIM_LEASE) == "UPDATE 1"


class ClockAhead(datetime):
    """``datetime`` whose ``now`` runs ``SKEW`` ahead: the wrong clock of one bot's machine."""

    @classmethod
    def now(cls, tz=None):  # type: ignore[override]
        return datetime.now(tz) + SKEW


async def test_a_bot_with_its_clock_ahead_does_not_score_an_exchange_another_bot_holds(
    memory_factory, judge, monkeypatch: pytest.MonkeyPatch
):
    first = await memory_factory(**llm_settings(judge))
    skewed = await memory_factory(**llm_settings(judge))
    now = datetime.now(timezone.utc)
    await exchange(first, "书放在哪了", "在书架上", now - timedelta(minutes=1))
    # The first bot claimed it (a lease of CLAIM_LEASE by the database's clock) and is still
    # scoring it...
    await lease(first, "UPDATE evaluation_queue SET not_before = now() + $1::interval")
    # ...when the second bot, whose machine's clock is 15 minutes ahead, looks for work.
    monkeypatch.setattr("memory_core.evaluation.worker.datetime", ClockAhead)
    assert await skewed.parts.evaluations.run_once() == 0
    assert judge.server.requests == []


async def test_a_bot_with_its_clock_ahead_does_not_take_a_session_another_bot_distils(
    memory_factory, distiller, monkeypatch: pytest.MonkeyPatch
):
    first = await memory_factory(**extraction_settings(distiller))
    skewed = await memory_factory(**extraction_settings(distiller))
    now = datetime.now(timezone.utc)
    store = first.parts.database.store(PgDistilledStore)
    await store.note_exchange("1", 1, None, now - timedelta(hours=2), turns=5)
    await lease(first, "UPDATE distilled_sessions SET not_before = now() + $1::interval")
    monkeypatch.setattr("memory_core.distill.worker.datetime", ClockAhead)
    assert await skewed.parts.extraction.run_once() == 0
    assert distiller.server.requests == []


async def test_a_bot_with_its_clock_ahead_purges_nothing_before_its_time(
    memory_factory, monkeypatch: pytest.MonkeyPatch
):
    memory = await memory_factory()
    await memory.parts.writer.add_turn(TurnInput(user_id=1, role="user", content="过一会儿才过期"))
    recent = timedelta(minutes=memory.parts.settings.chat_recent_minutes)
    async with memory.parts.database.pool.acquire() as conn:
        # Expired, but inside the short-term window by the database's clock for 5 more minutes.
        await conn.execute(
            "UPDATE dialogues SET expires_at = now() - $1::interval", recent - timedelta(minutes=5)
        )
    monkeypatch.setattr("memory_core.dialogue.upkeep.datetime", ClockAhead)
    assert await memory.purge_expired() == 0
