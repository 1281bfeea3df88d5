"""CachedEmbedder: LRU behaviour, one batched call per request, counters."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence

import numpy as np
import pytest

from memory_core.errors import EmbeddingError
from memory_core.providers.embedding import CachedEmbedder

DIM = 4


class CountingEmbedder:
    """Deterministic embedder that records every call it receives."""

    model = "test/counting"
    dim = DIM

    def __init__(self) -> None:
        self.passage_calls: list[list[str]] = []
        self.query_calls: list[str] = []
        self.closed = False
        self.fail = False

    @staticmethod
    def vector(kind: str, text: str) -> np.ndarray:
        digest = hashlib.blake2b(f"{kind}:{text}".encode("utf-8", "surrogatepass")).digest()
        vector = np.frombuffer(digest[:DIM], dtype=np.uint8).astype(np.float32) + 1.0
        return vector / np.linalg.norm(vector)

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        if self.fail:
            raise EmbeddingError("told to fail")
        self.passage_calls.append(list(texts))
        return np.stack([self.vector("passage", text) for text in texts])

    async def embed_query(self, text: str) -> np.ndarray:
        if self.fail:
            raise EmbeddingError("told to fail")
        self.query_calls.append(text)
        return self.vector("query", text)

    async def aclose(self) -> None:
        self.closed = True


async def test_repeated_passages_are_served_from_the_cache() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner, max_entries=10)

    first = await cache.embed_passages(["a", "b"])
    second = await cache.embed_passages(["a", "b"])

    assert inner.passage_calls == [["a", "b"]]
    np.testing.assert_array_equal(first, second)


async def test_all_misses_of_one_request_go_to_inner_in_one_call_in_order() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner, max_entries=10)
    await cache.embed_passages(["b"])

    vectors = await cache.embed_passages(["a", "b", "c", "a", "d"])

    assert inner.passage_calls == [["b"], ["a", "c", "d"]]
    expected = np.stack([CountingEmbedder.vector("passage", t) for t in "abcad"])
    np.testing.assert_array_equal(vectors, expected)


async def test_queries_and_passages_of_the_same_text_are_cached_apart() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner, max_entries=10)

    (passage,) = await cache.embed_passages(["same"])
    query = await cache.embed_query("same")
    again = await cache.embed_query("same")

    assert inner.query_calls == ["same"]
    assert not np.array_equal(passage, query)
    np.testing.assert_array_equal(query, again)


async def test_least_recently_used_entry_is_evicted_first() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner, max_entries=2)
    await cache.embed_passages(["a"])
    await cache.embed_passages(["b"])
    await cache.embed_passages(["a"])  # a is now the most recent

    await cache.embed_passages(["c"])  # evicts b
    await cache.embed_passages(["a"])
    await cache.embed_passages(["b"])

    assert inner.passage_calls == [["a"], ["b"], ["c"], ["b"]]
    assert cache.stats()["entries"] == 2


async def test_zero_max_entries_disables_the_cache() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner, max_entries=0)

    await cache.embed_query("q")
    await cache.embed_query("q")
    await cache.embed_passages(["a"])
    await cache.embed_passages(["a"])

    assert inner.query_calls == ["q", "q"]
    assert inner.passage_calls == [["a"], ["a"]]
    assert cache.stats() == {"hits": 0, "misses": 4, "entries": 0, "max_entries": 0}


async def test_stats_count_hits_and_misses_per_text() -> None:
    cache = CachedEmbedder(CountingEmbedder(), max_entries=10)

    await cache.embed_passages(["a", "b"])
    await cache.embed_passages(["a", "c"])
    await cache.embed_query("q")
    await cache.embed_query("q")

    assert cache.stats() == {"hits": 2, "misses": 4, "entries": 4, "max_entries": 10}


async def test_callers_cannot_corrupt_cached_vectors() -> None:
    cache = CachedEmbedder(CountingEmbedder(), max_entries=10)

    query = await cache.embed_query("q")
    query[:] = 0.0
    passages = await cache.embed_passages(["a"])
    passages[:] = 0.0

    assert float(np.linalg.norm(await cache.embed_query("q"))) == pytest.approx(1.0)
    assert float(np.linalg.norm((await cache.embed_passages(["a"]))[0])) == pytest.approx(1.0)


async def test_unpaired_surrogates_can_be_cache_keys() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner, max_entries=10)

    await cache.embed_passages(["bad \ud800 text"])
    await cache.embed_passages(["bad \ud800 text"])

    assert len(inner.passage_calls) == 1


async def test_a_failing_inner_embedder_caches_nothing() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner, max_entries=10)
    inner.fail = True

    with pytest.raises(EmbeddingError):
        await cache.embed_passages(["a"])
    inner.fail = False
    await cache.embed_passages(["a"])

    assert inner.passage_calls == [["a"]]


async def test_empty_request_returns_an_empty_matrix_without_calling_inner() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner, max_entries=10)

    vectors = await cache.embed_passages([])

    assert vectors.shape == (0, DIM)
    assert inner.passage_calls == []


async def test_model_dim_and_aclose_pass_through() -> None:
    inner = CountingEmbedder()
    cache = CachedEmbedder(inner, max_entries=10)

    await cache.aclose()

    assert (cache.model, cache.dim) == ("test/counting", DIM)
    assert inner.closed


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_query_that_just_failed_fails_at_once_until_its_failure_is_forgotten() -> None:
    inner = CountingEmbedder()
    clock = Clock()
    cache = CachedEmbedder(inner, max_entries=10, failure_memory=10.0, clock=clock)
    inner.fail = True
    with pytest.raises(EmbeddingError, match="told to fail"):
        await cache.embed_query("今天吃什么")
    inner.fail = False

    with pytest.raises(EmbeddingError, match="a moment ago"):
        await cache.embed_query("今天吃什么")  # the facts search of the same message
    assert inner.query_calls == []
    await cache.embed_query("别的问题")  # other queries are asked as usual
    clock.now += 10.0
    await cache.embed_query("今天吃什么")

    assert inner.query_calls == ["别的问题", "今天吃什么"]


class GatedEmbedder(CountingEmbedder):
    """Answers a query only once ``gate`` is open (a model run still going, for as long as the
    test wants)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.started = asyncio.Event()

    async def embed_query(self, text: str) -> np.ndarray:
        self.query_calls.append(text)
        self.started.set()
        await self.gate.wait()
        if self.fail:
            raise EmbeddingError("told to fail")
        return self.vector("query", text)


async def asked_twice(
    inner: GatedEmbedder, cache: CachedEmbedder, text: str
) -> tuple[asyncio.Future[np.ndarray], asyncio.Future[np.ndarray]]:
    """Two asks for ``text``: the second once the first is being embedded."""
    first = asyncio.ensure_future(cache.embed_query(text))
    await inner.started.wait()
    second = asyncio.ensure_future(cache.embed_query(text))
    await asyncio.sleep(0)  # the second asker is waiting now
    return first, second


async def test_a_query_asked_while_it_is_being_embedded_shares_that_embedding() -> None:
    inner = GatedEmbedder()
    cache = CachedEmbedder(inner, max_entries=10)
    first, second = await asked_twice(inner, cache, "那家店叫什么")
    other = asyncio.ensure_future(cache.embed_query("别的问题"))
    inner.gate.set()

    await asyncio.gather(first, second, other)
    one, two = first.result(), second.result()

    assert inner.query_calls == ["那家店叫什么", "别的问题"]
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one, CountingEmbedder.vector("query", "那家店叫什么"))
    one[0] = 99.0  # each caller has its own copy
    assert two[0] != 99.0
    assert cache.stats()["hits"] == 1 and cache.stats()["misses"] == 2


async def test_a_shared_query_that_fails_fails_for_every_asker_with_one_call() -> None:
    inner = GatedEmbedder()
    inner.fail = True
    cache = CachedEmbedder(inner, max_entries=10)
    first, second = await asked_twice(inner, cache, "今天吃什么")
    inner.gate.set()

    results = await asyncio.gather(first, second, return_exceptions=True)

    assert [type(r) for r in results] == [EmbeddingError, EmbeddingError]
    assert inner.query_calls == ["今天吃什么"]


async def test_when_the_first_asker_is_cancelled_the_one_waiting_asks_again() -> None:
    inner = GatedEmbedder()
    cache = CachedEmbedder(inner, max_entries=10)
    first, second = await asked_twice(inner, cache, "提醒我还书")
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    inner.gate.set()

    vector = await second

    np.testing.assert_array_equal(vector, CountingEmbedder.vector("query", "提醒我还书"))
    assert inner.query_calls == ["提醒我还书", "提醒我还书"]
