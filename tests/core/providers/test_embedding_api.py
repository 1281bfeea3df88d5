"""ApiEmbedder against a scripted OpenAI-style embeddings API: on httpx's ``MockTransport``,
and on a real loopback socket for the embedders built from settings and a real read timeout."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import pytest

from memory_core.errors import ConfigError, EmbeddingError
from memory_core.providers.embedding import ApiEmbedder, CachedEmbedder, api, build_embedder
from memory_core.providers.embedding.api import QWEN3_QUERY_PREFIX, build_api_embedder
from memory_core.providers.openai_api import OpenAIEndpoint
from memory_core.settings import MemorySettings
from tests.fakes import (
    Loopback,
    Received,
    json_response,
    mock_transport,
    raw_response,
    request_json,
)
from tests.first_read_short import FirstReadShort

DIM = 8
API_KEY = "sk-test-0123456789abcdef"


def raw_vector(text: str, dim: int) -> list[float]:
    """What the stub answers for ``text``: deterministic and deliberately not unit length."""
    seed = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")
    return (np.random.default_rng(seed).standard_normal(dim) * 3.0).tolist()


def unit_vector(text: str, dim: int = DIM) -> np.ndarray:
    vector = np.asarray(raw_vector(text, dim), dtype=np.float32)
    return vector / np.linalg.norm(vector)


@dataclass
class Step:
    """How the stand-in answers one request; the default is a correct answer. With ``hang`` it
    answers only once the test is over (``release``), so the client surely gives up first
    however slow the machine; ``fail`` raises what httpx's transport raises (a timeout, a
    refused connection), with no socket and no timer."""

    status: int = 200
    hang: bool = False
    fail: type[httpx.TransportError] | None = None
    dim: int | None = None
    body: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    drop_vectors: int = 0
    echo_authorization: bool = False


class EmbeddingAPI:
    """An OpenAI-style ``/v1/embeddings`` that plays a scripted list of ``Step``s, then answers
    correctly. ``respond`` runs on httpx's ``MockTransport``; ``loopback`` serves it on a socket."""

    def __init__(self, dim: int = DIM) -> None:
        self.dim = dim
        self.plan: list[Step] = []
        self.received: list[Received] = []
        self.released = threading.Event()

    async def respond(self, request: httpx.Request) -> httpx.Response:
        payload = request_json(request)
        headers = {key.lower(): value for key, value in request.headers.items()}
        self.received.append(Received(request.url.path, headers, payload))
        step = self.plan.pop(0) if self.plan else Step()
        if step.fail is not None:
            raise step.fail("stand-in: no answer", request=request)
        if step.hang:
            await asyncio.to_thread(self.released.wait, 300)  # a bound against a stuck test
        if step.body is not None:
            return raw_response(step.status, step.body.encode("utf-8"), step.headers)
        if step.echo_authorization:
            echoed = {"error": "bad key", "you_sent": headers.get("authorization")}
            return json_response(step.status, echoed, step.headers)
        if step.status != 200:
            error = {"error": {"message": f"stub says {step.status}"}}
            return json_response(step.status, error, step.headers)
        data = [
            {
                "object": "embedding",
                "index": index,
                "embedding": raw_vector(text, step.dim or self.dim),
            }
            for index, text in enumerate(payload["input"])
        ]
        # Answer out of order: the client must sort by ``index``.
        data = list(reversed(data))[: len(data) - step.drop_vectors]
        answer = {"object": "list", "data": data, "model": payload["model"]}
        return json_response(200, answer, step.headers)

    def inputs(self) -> list[list[str]]:
        return [item.body["input"] for item in self.received]

    def release(self) -> None:
        self.released.set()


@pytest.fixture(autouse=True)
def _no_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing stand-in answers at once: the factory's embedder does not retry it."""
    monkeypatch.setattr(api, "EMBEDDING_MAX_RETRIES", 0)


@pytest.fixture
def server() -> Iterator[EmbeddingAPI]:
    api = EmbeddingAPI()
    yield api
    api.release()


@pytest.fixture
def loopback(server: EmbeddingAPI) -> Iterator[str]:
    """``server`` on a real socket (its base URL): for embedders built from settings, and a
    real read timeout."""
    served = Loopback(server.respond)
    yield f"{served.origin}/v1"
    server.release()
    served.close()


class SleepRecorder:
    """Replaces ``asyncio.sleep`` in the embedder so retry tests wait for nothing."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


EmbedderFactory = Callable[..., ApiEmbedder]


@pytest.fixture
async def make_embedder(server: EmbeddingAPI) -> AsyncIterator[EmbedderFactory]:
    clients: list[httpx.AsyncClient] = []

    def factory(
        *,
        timeout: float = 5.0,
        base_url: str = "https://embed.example.test/v1",
        transport: httpx.AsyncBaseTransport | None = None,
        **kwargs: Any,
    ) -> ApiEmbedder:
        client = httpx.AsyncClient(
            transport=transport or mock_transport(server.respond),
            base_url=base_url,
            # Only reads are made short: a loaded CI machine may take longer to connect.
            timeout=httpx.Timeout(timeout, connect=max(timeout, 5.0)),
            headers={"Authorization": f"Bearer {API_KEY}"},
            trust_env=False,
        )
        clients.append(client)
        retry: dict[str, Any] = {"max_retries": 3, "max_delay": 20.0, "sleep": SleepRecorder()}
        endpoint_options = ("max_retries", "backoff_base", "max_delay", "breaker_failures")
        endpoint_options += ("breaker_cooldown", "clock")
        retry.update({k: kwargs.pop(k) for k in endpoint_options if k in kwargs})
        endpoint = OpenAIEndpoint(client, label="embedding API", error=EmbeddingError, **retry)
        options: dict[str, Any] = {"model": "test/embed", "dim": DIM}
        options.update(kwargs)
        return ApiEmbedder(endpoint=endpoint, **options)

    yield factory
    for client in clients:
        await client.aclose()


def sleeps_of(embedder: ApiEmbedder) -> list[float]:
    recorder = embedder._endpoint._sleep
    assert isinstance(recorder, SleepRecorder)
    return recorder.delays


# --- the happy path ---------------------------------------------------------------------


async def test_passages_come_back_in_input_order_normalised_float32(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    embedder = make_embedder()
    texts = ["早上好", "我们明天去爬山", "remember my cat is called Mochi"]

    vectors = await embedder.embed_passages(texts)

    assert vectors.shape == (3, DIM)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    for row, text in zip(vectors, texts, strict=True):
        np.testing.assert_allclose(row, unit_vector(text), rtol=1e-5, atol=1e-6)


async def test_request_is_an_openai_embeddings_post_with_float_encoding(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    await make_embedder().embed_passages(["hello"])

    (request,) = server.received
    assert request.path == "/v1/embeddings"
    assert request.body == {
        "model": "test/embed",
        "input": ["hello"],
        "encoding_format": "float",
    }
    assert request.headers["authorization"] == f"Bearer {API_KEY}"


async def test_batches_are_split_by_batch_size(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    embedder = make_embedder(batch_size=2)
    texts = [f"turn {i}" for i in range(5)]

    vectors = await embedder.embed_passages(texts)

    assert server.inputs() == [["turn 0", "turn 1"], ["turn 2", "turn 3"], ["turn 4"]]
    np.testing.assert_allclose(vectors[4], unit_vector("turn 4"), rtol=1e-5, atol=1e-6)


async def test_empty_passage_list_sends_no_request(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    vectors = await make_embedder().embed_passages([])

    assert vectors.shape == (0, DIM)
    assert server.received == []


async def test_query_of_a_qwen3_model_carries_the_instruction_but_passages_do_not(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    embedder = make_embedder(model="Qwen/Qwen3-Embedding-0.6B")

    query = await embedder.embed_query("我的猫叫什么")
    await embedder.embed_passages(["我的猫叫团子"])

    assert server.inputs() == [[QWEN3_QUERY_PREFIX + "我的猫叫什么"], ["我的猫叫团子"]]
    assert query.shape == (DIM,)


async def test_query_of_other_models_is_sent_as_is(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    await make_embedder(model="BAAI/bge-m3").embed_query("我的猫叫什么")

    assert server.inputs() == [["我的猫叫什么"]]


# --- bad input --------------------------------------------------------------------------


async def test_surrogates_nul_empty_emoji_and_100kb_inputs_are_sent_safely(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    embedder = make_embedder(max_chars=4096)
    texts = [
        "lone \ud800 high and \udfff low",
        "split pair \ud83d\ude00 joins",
        "nul\x00in\x00side",
        "",
        "\x00",
        "emoji 😀👨‍👩‍👧 ok",
        "长" * 100_000,
    ]

    vectors = await embedder.embed_passages(texts)

    (sent,) = server.inputs()
    assert sent[0] == "lone \ufffd high and \ufffd low"
    assert sent[1] == "split pair 😀 joins"
    assert sent[2] == "nulinside"
    assert sent[3] == " "
    assert sent[4] == " "
    assert sent[5] == "emoji 😀👨‍👩‍👧 ok"
    assert sent[6] == "长" * 4096
    assert vectors.shape == (len(texts), DIM)


# --- retries ----------------------------------------------------------------------------


async def test_server_errors_are_retried_until_the_server_recovers(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    server.plan = [Step(status=500), Step(status=503)]
    embedder = make_embedder(max_retries=3)

    vectors = await embedder.embed_passages(["still here"])

    assert len(server.received) == 3
    assert len(sleeps_of(embedder)) == 2
    np.testing.assert_allclose(vectors[0], unit_vector("still here"), rtol=1e-5, atol=1e-6)


async def test_retries_are_bounded_and_end_in_embedding_error_naming_the_status(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    server.plan = [Step(status=502) for _ in range(10)]
    embedder = make_embedder(max_retries=2)

    with pytest.raises(EmbeddingError, match="HTTP 502"):
        await embedder.embed_passages(["x"])

    assert len(server.received) == 3


async def test_zero_retries_means_exactly_one_request(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    server.plan = [Step(status=500)]

    with pytest.raises(EmbeddingError):
        await make_embedder(max_retries=0).embed_passages(["x"])

    assert len(server.received) == 1


async def test_backoff_grows_exponentially_with_jitter_within_each_step(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    server.plan = [Step(status=500) for _ in range(4)]
    embedder = make_embedder(max_retries=4, backoff_base=1.0, max_delay=3.0)

    await embedder.embed_passages(["x"])

    first, second, third, fourth = sleeps_of(embedder)
    assert 0.5 <= first <= 1.0
    assert 1.0 <= second <= 2.0
    assert 1.5 <= third <= 3.0  # 4 s step, capped at max_delay
    assert 1.5 <= fourth <= 3.0


async def test_429_waits_for_retry_after_then_succeeds(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    server.plan = [Step(status=429, headers={"Retry-After": "7"})]
    embedder = make_embedder(max_delay=20.0)

    await embedder.embed_passages(["x"])

    assert sleeps_of(embedder) == [7.0]
    assert len(server.received) == 2


async def test_retry_after_is_capped_at_max_delay(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    server.plan = [Step(status=429, headers={"Retry-After": "3600"})]
    embedder = make_embedder(max_delay=5.0)

    await embedder.embed_passages(["x"])

    assert sleeps_of(embedder) == [5.0]


async def test_retry_after_as_http_date_is_understood(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    server.plan = [Step(status=503, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})]
    embedder = make_embedder()

    await embedder.embed_passages(["x"])

    assert sleeps_of(embedder) == [0.0]  # a date in the past means "now"


async def test_timeouts_are_retried_then_raise_embedding_error(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    # The read timeout as httpx's transport raises it; a real one is in the next test.
    server.plan = [Step(fail=httpx.ReadTimeout), Step(fail=httpx.ReadTimeout)]
    embedder = make_embedder(max_retries=1)

    with pytest.raises(EmbeddingError, match="unreachable after 2 attempts") as caught:
        await embedder.embed_passages(["x"])

    assert isinstance(caught.value.__cause__, httpx.TimeoutException)
    assert len(server.received) == 2


async def test_one_slow_answer_is_retried_and_the_next_one_used(
    server: EmbeddingAPI, loopback: str, make_embedder: EmbedderFactory
) -> None:
    # A real read timeout, on a real socket. Only the first attempt has the short read timeout
    # (it hangs, so it surely times out); the retry's answer has the client's own 5 s, not a
    # 0.2 s race against a busy machine.
    server.plan = [Step(hang=True)]
    embedder = make_embedder(max_retries=1, base_url=loopback, transport=FirstReadShort(read=0.2))

    vectors = await embedder.embed_passages(["x"])

    assert vectors.shape == (1, DIM)
    assert len(server.received) == 2


async def test_refused_connections_are_retried_then_raise_embedding_error(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    server.plan = [Step(fail=httpx.ConnectError) for _ in range(3)]
    embedder = make_embedder(max_retries=2)

    with pytest.raises(EmbeddingError, match="unreachable after 3 attempts") as caught:
        await embedder.embed_query("x")

    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert len(sleeps_of(embedder)) == 2


# --- failing fast -----------------------------------------------------------------------


async def test_401_fails_at_once_and_never_repeats_the_api_key(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    server.plan = [Step(status=401, echo_authorization=True)]
    embedder = make_embedder(max_retries=3)

    with pytest.raises(EmbeddingError, match="HTTP 401") as caught:
        await embedder.embed_passages(["x"])

    assert len(server.received) == 1
    assert sleeps_of(embedder) == []
    assert API_KEY not in str(caught.value)
    assert "bad key" in str(caught.value)


async def test_400_fails_at_once_with_a_short_body_excerpt(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    server.plan = [Step(status=400, body="input too long " + "x" * 5000)]

    with pytest.raises(EmbeddingError, match=r"HTTP 400.*input too long") as caught:
        await make_embedder().embed_passages(["x"])

    assert len(server.received) == 1
    assert len(str(caught.value)) < 400


async def test_wrong_dimension_raises_naming_both_dimensions(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    server.plan = [Step(dim=16)]

    with pytest.raises(EmbeddingError) as caught:
        await make_embedder().embed_passages(["x"])

    message = str(caught.value)
    assert "16-dimensional" in message
    assert f"configured dimension is {DIM}" in message


async def test_fewer_vectors_than_inputs_raises(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    server.plan = [Step(drop_vectors=1)]

    with pytest.raises(EmbeddingError, match="1 vectors for 2 inputs"):
        await make_embedder().embed_passages(["a", "b"])


async def test_unreadable_answer_raises_embedding_error(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    server.plan = [Step(body="<html>gateway says hi</html>")]

    with pytest.raises(EmbeddingError, match="unreadable body"):
        await make_embedder().embed_passages(["x"])


async def test_all_zero_vector_raises_embedding_error(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    zero = json.dumps({"data": [{"index": 0, "embedding": [0.0] * DIM}]})
    server.plan = [Step(body=zero)]

    with pytest.raises(EmbeddingError, match="all-zero"):
        await make_embedder().embed_passages(["x"])


# --- cache in front of the API ----------------------------------------------------------


async def test_cached_api_embedder_sends_each_text_once(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    cached = CachedEmbedder(make_embedder(), max_entries=100)

    first = await cached.embed_passages(["a", "b"])
    second = await cached.embed_passages(["b", "c", "a"])
    await cached.embed_query("a")
    await cached.embed_query("a")

    assert server.inputs() == [["a", "b"], ["c"], ["a"]]
    np.testing.assert_array_equal(second[2], first[0])
    assert cached.stats()["hits"] == 3  # b and a, then the repeated query


# --- the factory ------------------------------------------------------------------------


def api_settings(base_url: str, **overrides: Any) -> MemorySettings:
    values: dict[str, Any] = {
        "embedding_provider": "api",
        "embedding_base_url": base_url,
        "embedding_api_key": API_KEY,
        "embedding_model": "test/embed",
        "embedding_dim": DIM,
        "embedding_batch_size": 2,
        "embedding_cache_size": 0,
    }
    values.update(overrides)
    return MemorySettings(**values)


async def test_build_api_embedder_uses_base_url_key_model_and_batch_size(
    server: EmbeddingAPI, loopback: str
) -> None:
    embedder = build_api_embedder(api_settings(loopback))
    try:
        await embedder.embed_passages(["a", "b", "c"])
    finally:
        await embedder.aclose()

    assert server.inputs() == [["a", "b"], ["c"]]
    assert {item.headers["authorization"] for item in server.received} == {f"Bearer {API_KEY}"}
    assert {item.body["model"] for item in server.received} == {"test/embed"}


async def test_build_api_embedder_without_a_key_sends_no_authorization(
    server: EmbeddingAPI, loopback: str
) -> None:
    embedder = build_api_embedder(api_settings(loopback, embedding_api_key=None))
    try:
        await embedder.embed_query("a")
    finally:
        await embedder.aclose()

    assert "authorization" not in server.received[0].headers


async def test_built_embedder_owns_its_client_and_fails_cleanly_after_aclose(
    server: EmbeddingAPI, loopback: str
) -> None:
    embedder = build_api_embedder(api_settings(loopback))
    await embedder.aclose()

    with pytest.raises(EmbeddingError):
        await embedder.embed_query("a")


async def test_build_embedder_for_api_wraps_in_cache_when_enabled(
    server: EmbeddingAPI, loopback: str
) -> None:
    embedder = await build_embedder(api_settings(loopback, embedding_cache_size=10))
    try:
        assert isinstance(embedder, CachedEmbedder)
        assert (embedder.model, embedder.dim) == ("test/embed", DIM)
        await embedder.embed_query("a")
        await embedder.embed_query("a")
    finally:
        await embedder.aclose()

    assert len(server.received) == 1


def test_api_defaults_are_siliconflow_qwen3_1024() -> None:
    embedder = build_api_embedder(MemorySettings(embedding_provider="api"))

    assert (embedder.model, embedder.dim) == ("Qwen/Qwen3-Embedding-0.6B", 1024)
    assert str(embedder._endpoint._client.base_url) == "https://api.siliconflow.cn/v1/"


@pytest.mark.parametrize("bad_url", ["ftp://example.com/v1", "api.siliconflow.cn/v1", "http://"])
def test_build_api_embedder_rejects_a_base_url_that_is_not_http(bad_url: str) -> None:
    with pytest.raises(ConfigError, match="EMBEDDING_BASE_URL"):
        build_api_embedder(MemorySettings(embedding_provider="api", embedding_base_url=bad_url))


# --- a dead endpoint and a waiting user -------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_dead_endpoint_is_not_asked_again_until_its_cooldown_has_passed(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    clock = FakeClock()
    embedder = make_embedder(max_retries=0, breaker_failures=3, breaker_cooldown=30.0, clock=clock)
    server.plan = [Step(status=503) for _ in range(3)]
    for _ in range(3):
        with pytest.raises(EmbeddingError, match="HTTP 503"):
            await embedder.embed_passages(["x"])
    # Open: the next calls fail at once, without a request.
    with pytest.raises(EmbeddingError, match="is failing; not asked again for 30s"):
        await embedder.embed_query("x")
    assert len(server.received) == 3
    # After the cooldown one call goes through; it succeeds, and the breaker closes.
    clock.now += 31
    assert (await embedder.embed_query("x")).shape == (DIM,)
    assert (await embedder.embed_query("y")).shape == (DIM,)
    assert len(server.received) == 5


async def test_an_embedder_says_it_is_failing_from_its_breakers_count_until_a_call_answers(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    from memory_core.providers.embedding import CachedEmbedder
    from memory_core.providers.openai_api import is_failing

    clock = FakeClock()
    embedder = make_embedder(max_retries=0, breaker_failures=3, breaker_cooldown=30.0, clock=clock)
    cached = CachedEmbedder(embedder, 10)  # as build_embedder wraps it: the console asks this
    server.plan = [Step(status=503) for _ in range(3)]
    for failed in range(3):
        assert not is_failing(cached)  # two failures in a row are no outage yet
        with pytest.raises(EmbeddingError):
            await embedder.embed_passages([f"x{failed}"])
    assert is_failing(cached) and embedder.failing
    clock.now += 31  # past the cooldown the breaker lets one call through: still failing
    assert is_failing(cached)
    assert (await cached.embed_query("y")).shape == (DIM,)
    assert not is_failing(cached)


async def test_a_query_embedding_gives_up_at_its_deadline_whatever_the_retries(
    server: EmbeddingAPI, make_embedder: EmbedderFactory
) -> None:
    server.plan = [Step(hang=True) for _ in range(4)]
    embedder = make_embedder(timeout=5.0, max_retries=3, query_deadline=0.3)
    with pytest.raises(EmbeddingError, match=r"no answer within 0\.3s"):
        await embedder.embed_query("我的猫叫什么")
    assert len(server.received) == 1
