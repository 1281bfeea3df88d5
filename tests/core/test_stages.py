"""The stage timer: nothing without a clock, one clock per message, counted after the reply."""

from __future__ import annotations

import asyncio
from datetime import date

from memory_core.conversation.engine import ConversationEngine, Delivery
from memory_core.models import TurnInput
from memory_core.stages import STAGE_MESSAGES, clocked, current_clock, stage
from memory_core.storage.counters import PgCounterStore
from tests.fakes import RecordingModel


def test_a_stage_without_a_clock_times_nothing() -> None:
    with stage("tail"):
        pass
    assert current_clock() is None


async def test_a_clock_gathers_the_stages_of_the_tasks_it_starts_and_ends_with_its_block() -> None:
    async def step(name: str) -> None:
        with stage(name):
            await asyncio.sleep(0)

    with clocked():
        clock = current_clock()
        assert clock is not None
        with clocked():  # the handler's clock goes on in the engine
            assert current_clock() is clock
        await asyncio.gather(step("recall"), step("store_user"), step("recall"))
        metrics = clock.metrics()
    assert current_clock() is None
    assert metrics[STAGE_MESSAGES] == 1
    assert {"stage_recall_us", "stage_store_user_us", "stage_whole_us"} <= metrics.keys()
    assert {"stage_recall_cpu_us", "stage_store_user_cpu_us", "stage_whole_cpu_us"} <= set(metrics)
    assert all(value >= 0 for value in metrics.values())
    with clocked(on=False):
        assert current_clock() is None


async def test_each_reply_is_counted_on_its_own_clock(memory_factory) -> None:
    memory = await memory_factory(memory_stage_times=True)
    engine = ConversationEngine(
        parts=memory.parts, chat_model=RecordingModel("好的"), bot_name="小诗"
    )

    async def send(text: str) -> Delivery:
        return Delivery(text=text, message_id=None)

    for number in (1, 2):  # one task, two messages
        turn = TurnInput(user_id=1, role="user", content=f"第{number}句", message_id=number)
        await engine.converse(turn, send)

    assert current_clock() is None
    totals = await memory.parts.database.store(PgCounterStore).metric_totals(date(2000, 1, 1))
    assert totals[STAGE_MESSAGES] == 2
    for name in ("tail", "prepare", "recall", "send", "store_user", "store_assistant", "whole"):
        assert f"stage_{name}_us" in totals and f"stage_{name}_cpu_us" in totals
    assert totals["stage_whole_us"] >= totals["stage_prepare_us"]


async def test_no_stage_is_counted_when_the_timer_is_off(memory_factory) -> None:
    memory = await memory_factory()
    engine = ConversationEngine(
        parts=memory.parts, chat_model=RecordingModel("好的"), bot_name="小诗"
    )

    async def send(text: str) -> Delivery:
        return Delivery(text=text, message_id=None)

    await engine.converse(TurnInput(user_id=1, role="user", content="你好", message_id=1), send)

    totals = await memory.parts.database.store(PgCounterStore).metric_totals(date(2000, 1, 1))
    assert not [name for name in totals if name.startswith("stage_")]
    assert totals["recall_replies"] == 1
