"""Embedding failures lose no turn; a model switch is refused until `reembed` runs."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import datetime, timezone

import numpy as np
import pytest

from memory_core.errors import EmbeddingModelMismatchError
from memory_core.models import TurnInput
from memory_core.recall.options import RecallOptions
from tests.fakes import HashingEmbedder, HashingEmbeddingAPI
from tests.window_gate import gate_the_window

NOW = datetime(2030, 1, 1, tzinfo=timezone.utc)


def said(text: str, message_id: int) -> TurnInput:
    return TurnInput(
        user_id=3,
        role="user",
        content=text,
        message_id=message_id,
        created_at=datetime(2024, 1, 1, 12, message_id, tzinfo=timezone.utc),
    )


@pytest.fixture
def flaky_server() -> HashingEmbeddingAPI:
    return HashingEmbeddingAPI(dim=64, healthy=False)


async def test_embedding_api_failing_then_recovering_loses_no_turn(memory_factory, flaky_server):
    # No cooldown: the breaker lets the first call after recovery through at once (its own
    # test, in tests/core/providers, covers the wait).
    embedder = flaky_server.embedder()
    memory = await memory_factory(embedder=embedder, embedding_provider="api", embedding_dim=64)
    outcomes = [
        await memory.parts.writer.add_turn(said(f"我的第{i}个爱好是下棋", i)) for i in range(5)
    ]
    assert all(o.turn is not None for o in outcomes)
    assert flaky_server.requests > 0
    stats = await memory.stats()
    assert stats.total_rows == 5 and stats.store.pending_embeddings == 5
    # While nothing is embedded, vector recall finds no anchors — but never fails — and
    # hybrid recall still finds the turns through the keyword channel (issue 6).
    assert (
        await memory.parts.retriever.recall(
            3, "爱好", options=RecallOptions(mode="vector", now=NOW)
        )
    ).turns == ()
    assert len(await memory.parts.retriever.get_contextual_memory(3, "爱好", top_n=5, now=NOW)) == 5
    flaky_server.healthy = True
    assert await memory.parts.upkeep.backfill_embeddings() == 5
    assert (await memory.stats()).store.pending_embeddings == 0
    recalled = await memory.parts.retriever.get_contextual_memory(3, "爱好 下棋", top_n=5, now=NOW)
    assert len(recalled) == 5


async def test_failing_embedder_stores_turn_and_backfill_makes_it_recallable(memory_factory):
    embedder = HashingEmbedder()
    memory = await memory_factory(embedder=embedder)
    embedder.fail = True
    outcome = await memory.parts.writer.add_turn(said("我家的狗叫旺财", 1))
    assert outcome.turn is not None
    embedder.fail = False
    assert (
        await memory.parts.retriever.recall(
            3, "狗叫什么", options=RecallOptions(mode="vector", now=NOW)
        )
    ).turns == ()
    await memory.parts.upkeep.backfill_embeddings()
    assert [
        t.content
        for t in await memory.parts.retriever.get_contextual_memory(3, "狗叫旺财", now=NOW)
    ] == ["我家的狗叫旺财"]


async def test_opening_with_another_embedding_model_is_refused_until_reembed(memory_factory):
    first = await memory_factory(embedder=HashingEmbedder(dim=384, model="model-a"))
    await first.parts.writer.add_dialogues([said("我喜欢爬山", 1), said("周末去了泰山", 2)])
    await first.aclose()

    other = HashingEmbedder(dim=128, model="model-b")
    with pytest.raises(EmbeddingModelMismatchError, match="python -m memory_core reembed"):
        await memory_factory(embedder=other)

    from memory_core import open_memory
    from memory_core.settings import MemorySettings

    settings = MemorySettings(
        memory_dsn=first.parts.settings.memory_dsn,
        memory_data_dir=first.parts.settings.memory_data_dir,
    )
    switching = await open_memory(
        settings, embedder=other, allow_model_change=True, maintenance_interval=None
    )
    try:
        assert await switching.reembed(batch_size=1) == 2
    finally:
        await switching.aclose()
    reopened = await memory_factory(embedder=HashingEmbedder(dim=128, model="model-b"))
    recalled = await reopened.parts.retriever.get_contextual_memory(3, "爬山", now=NOW)
    assert [t.content for t in recalled][:1] == ["我喜欢爬山"]
    assert reopened.parts.embedder.dim == 128


async def test_precomputed_embeddings_are_used_as_given(memory_factory):
    memory = await memory_factory()
    vectors = np.eye(384, dtype=np.float32)[:2]
    await memory.parts.writer.add_dialogues([said("甲", 1), said("乙", 2)], embeddings=vectors)
    assert (await memory.stats()).store.pending_embeddings == 0
    await asyncio.sleep(0)


class HangingEmbedder(HashingEmbedder):
    """Passages never come back until ``answering`` is set (an embedding API that stopped
    answering); queries are answered."""

    def __init__(self) -> None:
        super().__init__()
        self.answering = asyncio.Event()

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        await self.answering.wait()
        return await super().embed_passages(texts)


async def test_a_turn_whose_embedding_hangs_is_stored_at_the_deadline_and_embedded_later(
    memory_factory,
):
    embedder = HangingEmbedder()
    memory = await memory_factory(embedder=embedder, embedding_store_deadline=0.2)

    outcome = await asyncio.wait_for(
        memory.parts.writer.add_turn(said("我养了一只叫团子的猫", 1)), 30
    )

    assert outcome.turn is not None and not outcome.spooled
    assert (await memory.stats()).store.pending_embeddings == 1
    embedder.answering.set()
    assert await memory.parts.upkeep.backfill_embeddings() == 1
    recalled = await memory.parts.retriever.recall(
        3, "团子", options=RecallOptions(mode="vector", now=NOW)
    )
    assert [t.content for t in recalled.turns] == ["我养了一只叫团子的猫"]


async def test_a_failed_backfill_is_tried_again_by_the_maintenance_loop_without_new_turns(
    memory_factory,
):
    embedder = HashingEmbedder()
    memory = await memory_factory(embedder=embedder)
    embedder.fail = True
    await memory.parts.writer.add_turn(said("我的生日是三月三日", 1))
    failed_at_store = embedder.calls
    memory.start_maintenance(interval=0.05)
    for _ in range(3000):  # until two rounds of the loop failed (60 s at most), not a fixed time
        if embedder.calls >= failed_at_store + 2:
            break
        await asyncio.sleep(0.02)
    assert embedder.calls >= failed_at_store + 2
    assert (await memory.stats()).store.pending_embeddings == 1

    embedder.fail = False
    for _ in range(3000):  # polling (60 s at most), not timing it
        if (await memory.stats()).store.pending_embeddings == 0:
            break
        await asyncio.sleep(0.02)
    assert (await memory.stats()).store.pending_embeddings == 0


async def test_turns_to_embed_later_are_stored_at_once_and_embedded_in_one_call(
    memory_factory, monkeypatch
):
    window = gate_the_window(monkeypatch)  # lasts until opened below, not 0.2 s
    embedder = HashingEmbedder()
    memory = await memory_factory(embedder=embedder, embedding_defer_window=0.2)
    outcomes = [
        await memory.parts.writer.add_turn(said(f"我养了{i}只猫", i), embed_later=True)
        for i in (1, 2, 3)
    ]
    assert all(o.turn is not None for o in outcomes)
    assert embedder.calls == 0
    assert (await memory.stats()).store.pending_embeddings == 3
    assert window.waits == [0.2]  # one window collects all three
    window.open()
    await memory.parts.writer.settle_embeddings()
    assert embedder.calls == 1
    assert (await memory.stats()).store.pending_embeddings == 0
    found = await memory.parts.retriever.recall(
        3, "养猫", options=RecallOptions(mode="vector", now=NOW)
    )
    assert len(found.turns) == 3


async def test_a_deferred_embedding_that_fails_is_left_to_the_backfill(memory_factory):
    embedder = HashingEmbedder()
    memory = await memory_factory(embedder=embedder, embedding_defer_window=0.0)
    embedder.fail = True
    assert (
        await memory.parts.writer.add_turn(said("我家的狗叫旺财", 1), embed_later=True)
    ).turn is not None
    await memory.parts.writer.settle_embeddings()
    assert (await memory.stats()).store.pending_embeddings == 1
    embedder.fail = False
    assert await memory.parts.upkeep.backfill_embeddings() == 1
    assert (await memory.stats()).store.pending_embeddings == 0


async def test_the_backfill_leaves_a_turn_whose_deferred_embedding_is_still_to_come(
    memory_factory, monkeypatch
):
    window = gate_the_window(monkeypatch)  # the deferred turn is surely still to come
    embedder = HashingEmbedder()
    memory = await memory_factory(embedder=embedder, embedding_defer_window=0.5)
    await memory.parts.writer.add_turn(said("我喜欢爬山", 1))  # embedded at once
    embedder.fail = True
    await memory.parts.writer.add_turn(said("周末去了泰山", 2))  # failed: the backfill's
    embedder.fail = False
    await memory.parts.writer.add_turn(said("下周去黄山", 3), embed_later=True)
    assert (
        await memory.parts.upkeep.backfill_embeddings() == 1
    )  # not the deferred one: not embedded twice
    assert (await memory.stats()).store.pending_embeddings == 1
    window.open()
    await memory.parts.writer.settle_embeddings()
    assert (await memory.stats()).store.pending_embeddings == 0
