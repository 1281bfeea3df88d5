"""Reading one chat answer, JSON or server-sent events, and telling refusals apart."""

from __future__ import annotations

import json

import httpx
import pytest

from memory_core.errors import LLMError
from memory_core.providers.chat_turn import (
    refuses_tools,
    total_tokens,
    turn_from_events,
    turn_from_message,
    wants_stream,
)
from memory_core.providers.llm import OpenAIChatModel
from memory_core.providers.openai_api import OpenAIEndpoint


def _events(*chunks: object) -> str:
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


def test_events_join_content_and_tool_call_deltas_by_index():
    body = ": keep-alive\n\n" + _events(
        {"choices": [{"delta": {"content": "先"}}]},
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "a",
                                "function": {"name": "search_memory", "arguments": '{"que'},
                            }
                        ]
                    }
                }
            ]
        },
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 1,
                                "id": "b",
                                "function": {"name": "remember", "arguments": "{}"},
                            }
                        ]
                    }
                }
            ]
        },
        {
            "choices": [
                {"delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'ry": "猫"}'}}]}}
            ]
        },
        {"choices": [{"delta": {}, "finish_reason": "tool_calls"}]},
        {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}},
    )
    turn = turn_from_events(body)
    assert turn.text == "先"
    assert [(c.id, c.name, json.loads(c.arguments)) for c in turn.tool_calls] == [
        ("a", "search_memory", {"query": "猫"}),
        ("b", "remember", {}),
    ]
    assert turn.finish_reason == "tool_calls" and turn.tokens == 15


def test_a_body_without_chunks_is_not_a_stream():
    with pytest.raises(ValueError):
        turn_from_events("data: [DONE]\n\n")


def test_json_message_with_object_arguments_and_no_content():
    choice = {
        "message": {
            "content": None,
            "tool_calls": [
                {"id": "x", "function": {"name": "remember", "arguments": {"text": "好"}}}
            ],
        },
        "finish_reason": "tool_calls",
    }
    turn = turn_from_message(choice, {"prompt_tokens": 7, "completion_tokens": 2})
    assert turn.text == "" and turn.tokens == 9
    assert json.loads(turn.tool_calls[0].arguments) == {"text": "好"}


def test_total_tokens_without_usage_is_zero():
    assert total_tokens(None) == 0 and total_tokens({"total_tokens": True}) == 0


@pytest.mark.parametrize(
    "body",
    [
        "registry.ollama.ai/library/gemma:2b does not support tools",
        '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
        "deepseek-reasoner does not support Function Calling",
    ],
)
def test_refusals_of_tools_are_recognised(body):
    error = LLMError(f"chat model refused the request: HTTP 400: {body}")
    assert refuses_tools(error) and not wants_stream(error)


@pytest.mark.parametrize(
    "body",
    [
        "This model only support stream mode, please enable the stream parameter to access the "
        "model.",
        "stream must be true for this model",
    ],
)
def test_stream_only_refusals_are_recognised(body):
    error = LLMError(f"chat model refused the request: HTTP 400: {body}")
    assert wants_stream(error) and not refuses_tools(error)


def test_other_errors_are_neither():
    for text in (
        "chat model refused the request: HTTP 401: invalid api key",
        "chat model failed after 3 attempts: HTTP 503: tools overloaded",
        "chat model refused the request: HTTP 400: Unsupported value: 'stream' does not support "
        "true with this model",
    ):
        error = LLMError(text)
        assert not wants_stream(error) and not refuses_tools(error), text


def _model(handler, name: str) -> OpenAIChatModel:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://x/v1")
    endpoint = OpenAIEndpoint(client, label="chat model", error=LLMError, max_retries=0)
    return OpenAIChatModel(endpoint, name)


async def test_a_relay_that_streams_unasked_is_read_as_a_stream():
    body = _events(
        {"choices": [{"delta": {"content": "<think>嗯</think>你好"}}]},
        {"choices": [], "usage": {"prompt_tokens": 12, "total_tokens": 14}},
    )
    model = _model(lambda request: httpx.Response(200, text=body), "streams-unasked")
    try:
        assert await model.complete([{"role": "user", "content": "hi"}]) == "你好"
        assert model.usage.take()["chat_prompt_tokens"] == 12
        assert not model.streams  # nothing was refused: the calls stay as they were
    finally:
        await model.aclose()


async def test_plain_completions_learn_that_a_provider_streams_only():
    seen: list[bool] = []

    def handle(request: httpx.Request) -> httpx.Response:
        streamed = json.loads(request.content)["stream"]
        seen.append(streamed)
        if not streamed:
            message = "This model only support stream mode, please enable the stream parameter"
            return httpx.Response(400, json={"error": {"message": message}})
        chunk = {"choices": [{"delta": {"content": "好"}}]}
        return httpx.Response(
            200, text=_events(chunk), headers={"content-type": "text/event-stream"}
        )

    model = _model(handle, "stream-only")
    try:
        assert await model.complete([{"role": "user", "content": "hi"}]) == "好"
        assert await model.complete([{"role": "user", "content": "hi"}]) == "好"
        assert seen == [False, True, True] and model.streams
        # Another client of the same endpoint and model (the evaluator's) knows it too.
        other = _model(handle, "stream-only")
        assert await other.complete([{"role": "user", "content": "hi"}]) == "好"
        assert seen == [False, True, True, True]
        await other.aclose()
    finally:
        await model.aclose()
