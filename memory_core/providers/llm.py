"""The chat model seam: a small protocol and an OpenAI-compatible HTTP implementation.

Any ``/chat/completions`` endpoint works (SiliconFlow, DeepSeek, OpenAI, Ollama, vLLM). Failures
worth another try (timeouts, connection errors, HTTP 429 and 5xx) are retried a bounded number
of times with exponential backoff; everything else becomes ``LLMError`` at once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import httpx
from pydantic import SecretStr

from ..errors import ConfigError, LLMError
from ..settings import MemorySettings

logger = logging.getLogger(__name__)

_EXCERPT_CHARS = 200
_JSON_HEADERS = {"Content-Type": "application/json"}
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)


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

    Takes ownership of ``client`` (its base URL, auth header and timeouts are the caller's
    choice) and closes it in ``aclose``. ``max_tokens`` / ``temperature`` given here are defaults
    for every call; a call's own arguments win; ``None`` leaves the field out of the request.
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        model: str,
        max_retries: int,
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        self._client = client
        self._model = model
        self._max_retries = max_retries
        self._max_tokens = max_tokens
        self._temperature = temperature
        self._backoff_base = backoff_base
        self._backoff_max = backoff_max

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
        response = await self._post(payload)
        return self._answer(response)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _post(self, payload: dict[str, Any]) -> httpx.Response:
        body = _json_body(payload)
        attempts = self._max_retries + 1
        for attempt in range(1, attempts + 1):
            retry_after: float | None = None
            cause: Exception | None = None
            try:
                response = await self._client.post(
                    "chat/completions", content=body, headers=_JSON_HEADERS
                )
            except httpx.UnsupportedProtocol as exc:
                raise LLMError(f"chat model URL is not usable: {exc}") from exc
            except httpx.TimeoutException as exc:
                failure, cause = f"timed out ({type(exc).__name__})", exc
            except httpx.TransportError as exc:
                failure, cause = f"connection failed ({type(exc).__name__})", exc
            except httpx.HTTPError as exc:
                raise LLMError(f"chat model request failed: {type(exc).__name__}") from exc
            else:
                status = response.status_code
                if response.is_success:
                    return response
                if status != 429 and status < 500:
                    raise LLMError(
                        f"chat model answered HTTP {status}: {self._excerpt(response.text)}"
                    )
                failure = f"HTTP {status}: {self._excerpt(response.text)}"
                retry_after = _retry_after_seconds(response)

            if attempt == attempts:
                raise LLMError(f"chat model failed after {attempts} attempt(s): {failure}") from (
                    cause
                )
            delay = self._backoff(attempt, retry_after)
            logger.warning(
                "chat model attempt %d/%d failed (%s), retrying in %.2fs",
                attempt,
                attempts,
                failure.split(":", 1)[0],
                delay,
            )
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self._backoff_max)
        delay = min(self._backoff_base * 2 ** (attempt - 1), self._backoff_max)
        # Jitter so that many sessions hitting one rate limit do not retry in lockstep.
        return delay * random.uniform(0.5, 1.0)

    def _excerpt(self, body: str) -> str:
        """A short one-line piece of an error body, with our API key masked if echoed back."""
        text = " ".join(body.split())[:_EXCERPT_CHARS]
        secret = _bearer_token(self._client)
        if secret:
            text = text.replace(secret, "***")
        return text or "(empty body)"

    def _answer(self, response: httpx.Response) -> str:
        try:
            data = response.json()
        except ValueError as exc:
            raise LLMError(
                f"chat model answered with invalid JSON: {self._excerpt(response.text)}"
            ) from exc
        try:
            choice = data["choices"][0]
            content = choice["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise LLMError(
                f"chat model answer has no choices[0].message: {self._excerpt(response.text)}"
            ) from exc
        if not isinstance(content, str):
            raise LLMError(f"chat model answer content is {type(content).__name__}, not text")
        text = strip_reasoning(content)
        if not text:
            reason = choice.get("finish_reason") if isinstance(choice, dict) else None
            raise LLMError(f"chat model gave an empty answer (finish_reason={reason})")
        return text


def _json_body(payload: dict[str, Any]) -> bytes:
    text = json.dumps(payload, ensure_ascii=False)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Chat text can carry unpaired surrogates (broken emoji from clients); they cannot be
        # sent as UTF-8. Re-pair what forms a pair and replace the rest with U+FFFD.
        repaired = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return repaired.encode("utf-8")


def _bearer_token(client: httpx.AsyncClient) -> str | None:
    value = client.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


def _retry_after_seconds(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None  # an HTTP date; plain backoff is good enough


def build_openai_model(
    *,
    base_url: str,
    api_key: SecretStr | None,
    model: str,
    timeout: float,
    max_retries: int,
    max_tokens: int | None,
    temperature: float | None,
    setting_prefix: str,
) -> OpenAIChatModel:
    """An ``OpenAIChatModel`` owning its one ``httpx.AsyncClient`` (base URL, bearer, timeout)."""
    base_url = base_url.strip()
    if not base_url.startswith(("http://", "https://")):
        raise ConfigError(
            f"{setting_prefix}_BASE_URL must start with http:// or https://, got {base_url!r}"
        )
    headers = {}
    if api_key is not None:
        key = api_key.get_secret_value().strip()
        if key:
            headers["Authorization"] = f"Bearer {key}"
    client = httpx.AsyncClient(
        base_url=base_url,
        headers=headers,
        timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
        limits=httpx.Limits(max_connections=20, max_keepalive_connections=10),
    )
    return OpenAIChatModel(
        client, model, max_retries, max_tokens=max_tokens, temperature=temperature
    )


def build_chat_model(settings: MemorySettings) -> ChatModel | None:
    """The configured chat model, or ``None`` when no model is configured.

    The returned model owns its HTTP client; close it with ``aclose``.
    """
    if not settings.llm_configured:
        return None
    return build_openai_model(
        base_url=settings.llm_base_url,
        api_key=settings.llm_api_key,
        model=settings.llm_model,
        timeout=settings.llm_timeout,
        max_retries=settings.llm_max_retries,
        max_tokens=settings.llm_max_reply_tokens,
        temperature=settings.llm_temperature,
        setting_prefix="LLM",
    )
