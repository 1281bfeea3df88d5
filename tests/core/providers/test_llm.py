"""OpenAIChatModel against a scripted chat API: on httpx's ``MockTransport``, and on a real
loopback socket for the clients ``build_chat_model`` makes and for a real read timeout."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from memory_core.errors import ConfigError, LLMError
from memory_core.providers.llm import ChatModel, OpenAIChatModel, build_chat_model, strip_reasoning
from memory_core.providers.openai_api import OpenAIEndpoint
from memory_core.settings import MemorySettings
from tests.fakes import (
    Loopback,
    Reply,
    ScriptedAPI,
    fail_with,
    json_reply,
    json_response,
    mock_transport,
    raw_reply,
)
from tests.first_read_short import FirstReadShort

API_KEY = "sk-test-secret-0123456789"
MESSAGES = [{"role": "system", "content": "你是小诗"}, {"role": "user", "content": "你好"}]


def ok(content: Any = "你好呀", **extra: Any) -> Reply:
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        **extra,
    }
    return json_reply(200, answer)


def echo_auth_401() -> Reply:
    """A 401 whose body repeats the key it was sent, as some providers do."""

    async def reply(request: httpx.Request) -> httpx.Response:
        sent = request.headers.get("Authorization", "")
        return json_response(401, {"error": {"message": f"Incorrect API key provided: {sent}"}})

    return reply


@pytest.fixture
def server() -> Iterator[ScriptedAPI]:
    """The chat API a test scripts; on httpx's ``MockTransport`` unless served on ``loopback``."""
    api = ScriptedAPI(default=ok())
    yield api
    api.release()


@pytest.fixture
def loopback(server: ScriptedAPI) -> Iterator[Loopback]:
    """``server`` on a real socket: for clients built from settings, and real read timeouts."""
    served = Loopback(server.respond)
    yield served
    server.release()
    served.close()


ModelFactory = Callable[..., OpenAIChatModel]


@pytest.fixture
async def make_model(server: ScriptedAPI) -> AsyncIterator[ModelFactory]:
    made: list[OpenAIChatModel] = []

    def factory(
        *,
        max_retries: int = 2,
        timeout: float = 5.0,
        base_url: str = "https://chat.example.test/v1",
        max_delay: float = 0.05,
        transport: httpx.AsyncBaseTransport | None = None,
        **kwargs: Any,
    ) -> OpenAIChatModel:
        client = httpx.AsyncClient(
            base_url=base_url,
            headers={"Authorization": f"Bearer {API_KEY}"},
            timeout=httpx.Timeout(timeout, connect=max(timeout, 5.0)),  # CI may connect slowly
            trust_env=False,
            transport=transport or mock_transport(server.respond),
        )
        endpoint = OpenAIEndpoint(
            client, label="chat model", error=LLMError, max_retries=max_retries,
            backoff_base=0.01, max_delay=max_delay,
        )  # fmt: skip
        model = OpenAIChatModel(endpoint, "test-model", **kwargs)
        made.append(model)
        return model

    yield factory
    for model in made:
        await model.aclose()


# --- happy path -----------------------------------------------------------------------------


async def test_complete_posts_an_openai_chat_request_and_returns_the_answer(
    server: ScriptedAPI, make_model: ModelFactory
) -> None:
    server.reset(ok("你好，我是小诗"))
    model: ChatModel = make_model(max_tokens=256, temperature=0.3)
    assert await model.complete(MESSAGES) == "你好，我是小诗"
    [request] = server.received
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.body == {
        "model": "test-model",
        "messages": MESSAGES,
        "stream": False,
        "max_tokens": 256,
        "temperature": 0.3,
    }


async def test_call_arguments_override_defaults_and_unset_fields_are_left_out(
    server: ScriptedAPI, make_model: ModelFactory
) -> None:
    await make_model(max_tokens=256, temperature=0.3).complete(
        MESSAGES, max_tokens=10, temperature=0.0
    )
    await make_model().complete(MESSAGES)
    first, second = server.received
    assert (first.body["max_tokens"], first.body["temperature"]) == (10, 0.0)
    assert "max_tokens" not in second.body
    assert "temperature" not in second.body


async def test_unpaired_surrogates_in_messages_are_sent_as_replacement_characters(
    server: ScriptedAPI, make_model: ModelFactory
) -> None:
    messages = [{"role": "user", "content": "坏\ud83d的 \ud83d\ude00 表情"}]
    await make_model().complete(messages)
    assert server.received[0].body["messages"][0]["content"] == "坏\ufffd的 😀 表情"


async def test_think_block_is_stripped_from_the_answer(
    server: ScriptedAPI, make_model: ModelFactory
) -> None:
    server.reset(ok("<think>用户在打招呼，\n我应该回应。</think>\n\n你好！"))
    assert await make_model().complete(MESSAGES) == "你好！"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("答案", "答案"),
        ("<think>a</think>答<THINK>b</THINK>案", "答案"),
        ("只有结尾标签的推理</think>\n答案", "答案"),
        ("答案<think>被截断的推理", "答案"),
        ("  <think>\n</think>  答案  ", "答案"),
    ],
)
def test_strip_reasoning(raw: str, expected: str) -> None:
    assert strip_reasoning(raw) == expected


# --- retries --------------------------------------------------------------------------------


async def test_server_error_is_retried_then_the_answer_returned(
    server: ScriptedAPI, make_model: ModelFactory
) -> None:
    server.reset(json_reply(500, {"error": "boom"}), raw_reply(502, b"bad gateway"), ok("终于好了"))
    assert await make_model(max_retries=2).complete(MESSAGES) == "终于好了"
    assert len(server.received) == 3
    assert server.received[0].body == server.received[2].body


async def test_rate_limit_429_is_retried(server: ScriptedAPI, make_model: ModelFactory) -> None:
    server.reset(json_reply(429, {"error": "slow down"}, {"Retry-After": "0"}), ok("好"))
    assert await make_model(max_retries=1).complete(MESSAGES) == "好"
    assert len(server.received) == 2


async def test_retries_are_bounded_and_end_in_llm_error_naming_the_status(
    server: ScriptedAPI, make_model: ModelFactory
) -> None:
    server.reset(*[json_reply(503, {"error": "overloaded"})] * 5)
    with pytest.raises(LLMError, match="after 3 attempt") as caught:
        await make_model(max_retries=2).complete(MESSAGES)
    assert "503" in str(caught.value)
    assert "overloaded" in str(caught.value)
    assert len(server.received) == 3


async def test_zero_retries_means_exactly_one_request(
    server: ScriptedAPI, make_model: ModelFactory
) -> None:
    server.reset(json_reply(500, {}), ok())
    with pytest.raises(LLMError):
        await make_model(max_retries=0).complete(MESSAGES)
    assert len(server.received) == 1


async def test_timeout_is_retried_then_raises_llm_error(
    server: ScriptedAPI, make_model: ModelFactory
) -> None:
    # The read timeout as httpx's transport raises it; a real one is in the loopback test below.
    server.reset(fail_with(httpx.ReadTimeout), fail_with(httpx.ReadTimeout))
    with pytest.raises(LLMError, match="timed out") as caught:
        await make_model(max_retries=1).complete(MESSAGES)
    assert isinstance(caught.value.__cause__, httpx.TimeoutException)
    assert len(server.received) == 2


async def test_deadline_bounds_the_whole_call_when_the_model_hangs(
    server: ScriptedAPI, make_model: ModelFactory
) -> None:
    # Each attempt alone may take 5 s and three are allowed; the deadline cuts the call at 0.3 s.
    server.reset(server.hang(), server.hang(), server.hang())
    with pytest.raises(LLMError, match=r"no answer within 0\.3s"):
        await make_model(max_retries=2, timeout=5.0, deadline=0.3).complete(MESSAGES)
    assert len(server.received) == 1


async def test_no_retry_is_started_that_the_deadline_cannot_wait_for(
    server: ScriptedAPI, make_model: ModelFactory
) -> None:
    # The deadline is far longer than the 503 takes to come back on a loaded machine (so it is
    # not what ends the call) and still shorter than the 30 s the server asks to wait.
    server.reset(json_reply(503, {}, headers={"Retry-After": "30"}), ok())
    with pytest.raises(LLMError, match="deadline leaves no time to retry"):
        await make_model(max_retries=2, max_delay=60.0, deadline=20.0).complete(MESSAGES)
    assert len(server.received) == 1


async def test_timeout_then_success_returns_the_answer(
    server: ScriptedAPI, loopback: Loopback, make_model: ModelFactory
) -> None:
    # A real read timeout, on a real socket. Only the first attempt has the short read timeout
    # (it hangs, so it surely times out); the retry's answer has the client's own 5 s, not a
    # 0.2 s race against a busy machine.
    server.reset(server.hang(), ok("第二次成功"))
    model = make_model(
        max_retries=1, base_url=f"{loopback.origin}/v1", transport=FirstReadShort(read=0.2)
    )
    assert await model.complete(MESSAGES) == "第二次成功"
    assert len(server.received) == 2


async def test_connection_refused_raises_llm_error(
    server: ScriptedAPI, make_model: ModelFactory
) -> None:
    server.reset(fail_with(httpx.ConnectError), fail_with(httpx.ConnectError))
    model = make_model(max_retries=1)
    with pytest.raises(LLMError, match="connection failed") as caught:
        await model.complete(MESSAGES)
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


# --- errors that are not retried ------------------------------------------------------------


async def test_unauthorized_is_not_retried_and_the_error_never_shows_the_api_key(
    server: ScriptedAPI, make_model: ModelFactory
) -> None:
    server.reset(echo_auth_401(), ok())
    with pytest.raises(LLMError, match="HTTP 401") as caught:
        await make_model(max_retries=3).complete(MESSAGES)
    message = str(caught.value)
    assert "Incorrect API key provided" in message
    assert API_KEY not in message
    assert len(server.received) == 1


async def test_error_body_excerpt_is_short_and_single_line(
    server: ScriptedAPI, make_model: ModelFactory
) -> None:
    server.reset(raw_reply(400, ("参数错误\n" * 500).encode()))
    with pytest.raises(LLMError, match="HTTP 400") as caught:
        await make_model().complete(MESSAGES)
    assert "\n" not in str(caught.value)
    assert len(str(caught.value)) < 300


async def test_garbage_json_raises_llm_error_without_retry(
    server: ScriptedAPI, make_model: ModelFactory
) -> None:
    server.reset(raw_reply(200, b"<html>not json</html>"), ok())
    with pytest.raises(LLMError, match="invalid JSON"):
        await make_model().complete(MESSAGES)
    assert len(server.received) == 1


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {"choices": []},
        {"choices": [{"message": None}]},
        {"choices": "nope"},
        [1, 2, 3],
        {"error": {"message": "quota exceeded"}},
    ],
)
async def test_answer_without_a_message_raises_llm_error(
    server: ScriptedAPI, make_model: ModelFactory, payload: Any
) -> None:
    server.reset(json_reply(200, payload))
    with pytest.raises(LLMError, match="no choices"):
        await make_model().complete(MESSAGES)


async def test_an_answer_without_a_message_is_described_by_its_keys_not_its_text(
    server: ScriptedAPI, make_model: ModelFactory
) -> None:
    server.reset(json_reply(200, {"choices": [{"text": "你的工位密码是 4512"}]}))
    with pytest.raises(LLMError) as caught:
        await make_model().complete(MESSAGES)
    assert "4512" not in str(caught.value) and "keys: choices" in str(caught.value)
    server.reset(json_reply(200, {"error": {"message": "quota exceeded"}}))
    with pytest.raises(LLMError, match="error: quota exceeded"):
        await make_model().complete(MESSAGES)


@pytest.mark.parametrize("content", ["", "   \n", None, "<think>只有推理</think>", 42])
async def test_empty_or_non_text_answer_raises_llm_error(
    server: ScriptedAPI, make_model: ModelFactory, content: Any
) -> None:
    server.reset(ok(content))
    with pytest.raises(LLMError, match=r"empty answer|not text"):
        await make_model().complete(MESSAGES)


# --- build_chat_model -----------------------------------------------------------------------


def test_build_chat_model_returns_none_when_no_model_is_configured() -> None:
    assert build_chat_model(MemorySettings()) is None
    assert build_chat_model(MemorySettings(llm_model="", llm_api_key=SecretStr(API_KEY))) is None


def test_build_chat_model_rejects_a_base_url_without_scheme() -> None:
    settings = MemorySettings(llm_model="m", llm_base_url="api.example.com/v1")
    with pytest.raises(ConfigError, match="LLM_BASE_URL"):
        build_chat_model(settings)


async def test_build_chat_model_talks_to_the_configured_endpoint_with_the_key(
    server: ScriptedAPI, loopback: Loopback
) -> None:
    settings = MemorySettings(
        llm_base_url=f"{loopback.origin}/v1/",
        llm_api_key=SecretStr(API_KEY),
        llm_model="Qwen/Qwen2.5-7B-Instruct",
        llm_max_reply_tokens=321,
        llm_temperature=0.5,
    )
    model = build_chat_model(settings)
    assert model is not None
    try:
        server.reset(ok("配置好了"))
        assert await model.complete(MESSAGES) == "配置好了"
    finally:
        await model.aclose()
    [request] = server.received
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {API_KEY}"
    assert request.body["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert (request.body["max_tokens"], request.body["temperature"]) == (321, 0.5)


async def test_build_chat_model_without_key_sends_no_authorization(
    server: ScriptedAPI, loopback: Loopback
) -> None:
    settings = MemorySettings(llm_base_url=f"{loopback.origin}/v1", llm_model="qwen2.5")
    model = build_chat_model(settings)
    assert model is not None
    try:
        await model.complete(MESSAGES)
    finally:
        await model.aclose()
    assert "authorization" not in server.received[0].headers


# --- the provider's prefix cache, from usage --------------------------------------------------


async def test_cached_prompt_tokens_are_read_from_both_usage_shapes(
    server: ScriptedAPI, make_model: ModelFactory
) -> None:
    server.reset(
        # OpenAI, Qwen, SiliconFlow
        ok(usage={"prompt_tokens": 1200, "prompt_tokens_details": {"cached_tokens": 1024}}),
        # DeepSeek
        ok(usage={"prompt_tokens": 800, "prompt_cache_hit_tokens": 640}),
        ok(usage={"prompt_tokens": 100}),  # no cached count: nothing cached
        ok(),  # no usage at all: nothing counted
        ok(usage={"prompt_tokens": "many", "prompt_cache_hit_tokens": 5}),  # nonsense: skipped
    )
    model = make_model()
    for _ in range(5):
        assert await model.complete(MESSAGES) == "你好呀"
    assert model.usage.take() == {"chat_prompt_tokens": 2100, "chat_cached_tokens": 1664}
    assert model.usage.take() == {"chat_prompt_tokens": 0, "chat_cached_tokens": 0}
