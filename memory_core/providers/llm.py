"""The chat model seam: a small protocol and an OpenAI-compatible HTTP implementation.

Any ``/chat/completions`` endpoint works (SiliconFlow, DeepSeek, OpenAI, Ollama, vLLM); the
HTTP rules (retries, backoff, ``Retry-After``, key masking) are ``openai_api``'s.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from ..errors import LLMError
from ..settings import MemorySettings, ModelEndpoint
from .openai_api import OpenAIEndpoint, open_http_client

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
    """

    def __init__(
        self,
        endpoint: OpenAIEndpoint,
        model: str,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        deadline: float | None = None,
    ) -> None:
        self.usage = PromptUsage()
        self._endpoint = endpoint
        self._model = model
        self._max_tokens = max_tokens
        self._temperature = temperature
        self._deadline = deadline

    @property
    def failing(self) -> bool:
        """Whether the endpoint keeps failing (see ``OpenAIEndpoint.failing``)."""
        return self._endpoint.failing

    async def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> str:
        """The assistant's answer, reasoning blocks removed; ``LLMError`` on any failure."""
        payload: dict[str, Any] = {
            "model": self._model,
            "messages": [dict(message) for message in messages],
            "stream": False,
        }
        max_tokens = max_tokens if max_tokens is not None else self._max_tokens
        temperature = temperature if temperature is not None else self._temperature
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        if temperature is not None:
            payload["temperature"] = temperature
        response = await self._endpoint.post("chat/completions", payload, deadline=self._deadline)
        return self._answer(response)

    async def aclose(self) -> None:
        await self._endpoint.aclose()

    def _answer(self, response: httpx.Response) -> str:
        try:
            data = response.json()
        except ValueError as exc:
            raise LLMError(
                f"chat model answered with invalid JSON: {self._endpoint.excerpt(response.text)}"
            ) from exc
        try:
            choice = data["choices"][0]
            content = choice["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise LLMError(
                "chat model answer has no choices[0].message: "
                f"{self._endpoint.excerpt(response.text)}"
            ) from exc
        if not isinstance(content, str):
            raise LLMError(f"chat model answer content is {type(content).__name__}, not text")
        self.usage.add(data.get("usage"))  # billed even when the text turns out empty
        text = strip_reasoning(content)
        if not text:
            reason = choice.get("finish_reason") if isinstance(choice, dict) else None
            raise LLMError(f"chat model gave an empty answer (finish_reason={reason})")
        return text


def build_openai_model(
    endpoint: ModelEndpoint,
    *,
    max_retries: int,
    max_tokens: int | None,
    temperature: float | None,
    deadline: float | None = None,
) -> OpenAIChatModel:
    """An ``OpenAIChatModel`` for ``endpoint``, owning its one HTTP client."""
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
    )


def build_chat_model(settings: MemorySettings) -> OpenAIChatModel | None:
    """The configured chat model, or ``None`` when no model is configured.

    The returned model owns its HTTP client; close it with ``aclose``.
    """
    if not settings.llm_configured:
        return None
    return build_openai_model(
        settings.chat_endpoint,
        max_retries=settings.llm_max_retries,
        max_tokens=settings.llm_max_reply_tokens,
        temperature=settings.llm_temperature,
        deadline=settings.llm_reply_deadline,
    )
