"""The chat model seam: a small protocol and an OpenAI-compatible HTTP implementation.

Any ``/chat/completions`` endpoint works (SiliconFlow, DeepSeek, OpenAI, Ollama, vLLM); the
HTTP rules (retries, backoff, ``Retry-After``, key masking) are ``openai_api``'s.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

import httpx

from ..errors import LLMError
from ..settings import MemorySettings, ModelEndpoint
from ..stages import stage
from .chat_turn import (
    ModelTurn,
    looks_like_events,
    refuses_tools,
    turn_from_events,
    turn_from_message,
    wants_stream,
)
from .openai_api import OpenAIEndpoint, open_http_client

log = logging.getLogger(__name__)

# Retries of a failed chat call (timeouts, 429, 5xx; ``openai_api``): the reply deadline
# bounds them anyway, so more would only be cut off.
LLM_MAX_RETRIES = 2

ToolsMode = Literal["auto", "on", "off"]

# (base URL, model) of the endpoints found to serve only streamed calls, for the whole process:
# the chat, evaluation and extraction models often share one endpoint, each learns it once.
_STREAM_ONLY: set[tuple[str, str]] = set()

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)


# Daily counters (``memory_daily_stats``) of the chat model's prompts: the tokens its answers
# reported, and how many of them the provider served from its prefix cache (billed at a fraction).
CHAT_PROMPT_TOKENS = "chat_prompt_tokens"
CHAT_CACHED_TOKENS = "chat_cached_tokens"


@dataclass
class PromptUsage:
    """Prompt tokens reported by the answers since the last ``take``, and the cached part.

    Providers report the cached part in one of two shapes: OpenAI (and Qwen, SiliconFlow) as
    ``usage.prompt_tokens_details.cached_tokens``, DeepSeek as ``usage.prompt_cache_hit_tokens``.
    An answer without ``usage`` counts nothing; one without a cached count counts its prompt
    tokens as not cached."""

    prompt_tokens: int = 0
    cached_tokens: int = 0

    def add(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        prompt = _count(usage.get("prompt_tokens"))
        if prompt is None:
            return
        details = usage.get("prompt_tokens_details")
        cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else None
        if cached is None:
            cached = _count(usage.get("prompt_cache_hit_tokens"))
        self.prompt_tokens += prompt
        self.cached_tokens += min(cached or 0, prompt)

    def take(self) -> dict[str, int]:
        """The counts so far as daily-counter metrics, and start again from zero."""
        taken = {CHAT_PROMPT_TOKENS: self.prompt_tokens, CHAT_CACHED_TOKENS: self.cached_tokens}
        self.prompt_tokens = self.cached_tokens = 0
        return taken


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


class ChatModel(Protocol):
    """Answers a list of OpenAI-style chat messages with the assistant's text."""

    async def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> str: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class ToolChatModel(Protocol):
    """A chat model that can offer the model tools and report each call's cost
    (``OpenAIChatModel``); ``conversation.tools`` uses it when the engine's model is one."""

    @property
    def offers_tools(self) -> bool: ...

    async def respond(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        final: bool = False,
    ) -> ModelTurn: ...


def strip_reasoning(text: str) -> str:
    """Remove the ``<think>…</think>`` reasoning some models put before their answer.

    Also handles a lone ``</think>`` (the chat template opened the block inside the prompt, so
    everything before it is reasoning) and an unclosed ``<think>`` (the answer was cut off while
    the model was still reasoning, so everything after it is dropped).
    """
    text = _THINK_BLOCK.sub("", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    opened = _THINK_OPEN.search(text)
    if opened:
        text = text[: opened.start()]
    return text.strip()


class OpenAIChatModel:
    """``ChatModel`` over ``POST {base_url}/chat/completions`` of an OpenAI-compatible API.

    Takes ownership of ``endpoint`` and closes it in ``aclose``. ``max_tokens`` / ``temperature``
    given here are defaults for every call; a call's own arguments win; ``None`` leaves the field
    out of the request. ``deadline`` bounds each call, retries included. ``usage`` adds up the
    prompt tokens the answers report (``PromptUsage``).

    Two things are learnt from the endpoint once and kept for the process (each logged once):
    that it serves only streamed calls (every later call to that URL and model is streamed, by
    any instance, ``chat_turn``), and, with ``tools="auto"``, that it refuses tools (no later
    call of this instance, the chat model, offers them). ``tools="on"`` offers
    them always (a refused call is asked again without them); ``"off"`` never.
    """

    def __init__(
        self,
        endpoint: OpenAIEndpoint,
        model: str,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        deadline: float | None = None,
        tools: ToolsMode = "auto",
    ) -> None:
        self.usage = PromptUsage()
        self._endpoint = endpoint
        self._model = model
        self._max_tokens = max_tokens
        self._temperature = temperature
        self._deadline = deadline
        self._tools_mode: ToolsMode = tools
        self._tools_refused = False
        self._key = (endpoint.base_url, model)

    @property
    def failing(self) -> bool:
        """Whether the endpoint keeps failing (see ``OpenAIEndpoint.failing``)."""
        return self._endpoint.failing

    @property
    def tools_mode(self) -> ToolsMode:
        """CHAT_TOOLS as given."""
        return self._tools_mode

    @property
    def offers_tools(self) -> bool:
        """Whether the next call may offer tools (CHAT_TOOLS, and no refusal seen in auto)."""
        return self._tools_mode == "on" or (self._tools_mode == "auto" and not self._tools_refused)

    @property
    def streams(self) -> bool:
        """Whether calls are streamed (the endpoint refused one that was not)."""
        return self._key in _STREAM_ONLY

    async def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> str:
        """The assistant's answer, reasoning blocks removed; ``LLMError`` on any failure."""
        turn = await self._call(messages, None, False, max_tokens, temperature)
        text = strip_reasoning(turn.text)
        if not text:
            raise LLMError(f"chat model gave an empty answer (finish_reason={turn.finish_reason})")
        return text

    async def respond(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        final: bool = False,
    ) -> ModelTurn:
        """One call offering ``tools`` (when ``offers_tools``); ``final`` asks for text only
        (``tool_choice: none``) while keeping the tools in the request, so the prompt's prefix
        stays the same. The text keeps its reasoning blocks; ``LLMError`` on any failure."""
        offered = tools if tools and self.offers_tools else None
        try:
            return await self._call(messages, offered, final, None, None)
        except LLMError as exc:
            if offered is None or not refuses_tools(exc):
                raise
            if self._tools_mode == "auto":
                self._tools_refused = True
                log.warning("the chat model refused tools; they are off from now on: %s", exc)
            else:
                log.warning("the chat model refused tools (CHAT_TOOLS=on): %s", exc)
            return await self._call(messages, None, False, None, None)

    async def aclose(self) -> None:
        await self._endpoint.aclose()

    async def _call(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        final: bool,
        max_tokens: int | None,
        temperature: float | None,
    ) -> ModelTurn:
        payload: dict[str, Any] = {
            "model": self._model,
            "messages": [dict(message) for message in messages],
        }
        if tools:
            payload["tools"] = [dict(tool) for tool in tools]
            if final:
                payload["tool_choice"] = "none"
        max_tokens = max_tokens if max_tokens is not None else self._max_tokens
        temperature = temperature if temperature is not None else self._temperature
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        if temperature is not None:
            payload["temperature"] = temperature
        streamed = self.streams
        try:
            with stage("llm_http"):
                response = await self._post(payload, streamed)
        except LLMError as exc:
            if streamed or not wants_stream(exc):
                raise
            if not self.streams:
                _STREAM_ONLY.add(self._key)
                log.warning(
                    "%s at %s serves only streamed calls; streaming from now on", *self._key[::-1]
                )
            response = await self._post(payload, True)
        return self._answer(response)

    async def _post(self, payload: dict[str, Any], streamed: bool) -> httpx.Response:
        payload["stream"] = streamed
        if streamed:
            payload["stream_options"] = {"include_usage": True}  # the budget counts it
        else:
            payload.pop("stream_options", None)
        return await self._endpoint.post("chat/completions", payload, deadline=self._deadline)

    def _shape(self, data: object) -> str:
        """What an answer without a message holds: its keys and a provider's error text, not
        its values (a malformed answer can still carry what a person said)."""
        if not isinstance(data, dict):
            return f"a JSON {type(data).__name__}, not an object"
        shape = "keys: " + (", ".join(sorted(map(str, data))[:8]) or "none")
        error = data.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str):
            shape += f"; error: {self._endpoint.excerpt(message)}"
        return shape

    def _answer(self, response: httpx.Response) -> ModelTurn:
        body = response.text
        if looks_like_events(response.headers.get("content-type", ""), body):
            try:
                turn = turn_from_events(body)
            except ValueError as exc:
                raise LLMError(
                    f"chat model stream is unreadable ({exc}): {self._endpoint.excerpt(body)}"
                ) from exc
            self.usage.add(turn.usage)
            return turn
        try:
            data = response.json()
        except ValueError as exc:
            raise LLMError(
                f"chat model answered with invalid JSON: {self._endpoint.excerpt(body)}"
            ) from exc
        try:
            choice = data["choices"][0]
            if not isinstance(choice, dict) or not isinstance(choice["message"], dict):
                raise TypeError("choices[0].message is not an object")
        except (KeyError, IndexError, TypeError) as exc:
            raise LLMError(
                f"chat model answer has no choices[0].message: {self._shape(data)}"
            ) from exc
        try:
            turn = turn_from_message(choice, data.get("usage"))
        except ValueError as exc:
            raise LLMError(f"chat model answer is unusable: {exc}") from exc
        self.usage.add(data.get("usage"))  # billed even when the text turns out empty
        return turn


def build_openai_model(
    endpoint: ModelEndpoint,
    *,
    max_retries: int,
    max_tokens: int | None,
    temperature: float | None,
    deadline: float | None = None,
    tools: ToolsMode = "off",
) -> OpenAIChatModel:
    """An ``OpenAIChatModel`` for ``endpoint``, owning its one HTTP client (``tools``: see
    ``OpenAIChatModel``; off for the evaluator's and extractor's models)."""
    client = open_http_client(
        base_url=endpoint.base_url,
        api_key=endpoint.api_key,
        timeout=endpoint.timeout,
        setting_prefix=endpoint.setting_prefix,
        max_connections=20,
    )
    return OpenAIChatModel(
        OpenAIEndpoint(client, label="chat model", error=LLMError, max_retries=max_retries),
        endpoint.model,
        max_tokens=max_tokens,
        temperature=temperature,
        deadline=deadline,
        tools=tools,
    )


def build_chat_model(settings: MemorySettings) -> OpenAIChatModel | None:
    """The configured chat model, or ``None`` when no model is configured.

    The returned model owns its HTTP client; close it with ``aclose``.
    """
    if not settings.llm_configured:
        return None
    return build_openai_model(
        settings.chat_endpoint,
        max_retries=LLM_MAX_RETRIES,
        max_tokens=settings.llm_max_reply_tokens,
        temperature=settings.llm_temperature,
        deadline=settings.llm_reply_deadline,
        tools=settings.chat_tools,
    )
