"""Optional descriptions of pictures by an OpenAI-compatible vision model (``VISION_*``).

Off while ``VISION_MODEL`` is empty. With it, each picture read (not one seen before) is also
sent as an ``image_url`` data URL to ``{VISION_BASE_URL}/chat/completions`` (e.g. Qwen2.5-VL on
SiliconFlow), and the one-sentence answer goes before the recognised text:
``[图片：一只橘猫趴在键盘上；文字 …]``. Bounded and degrading like every outside call: one
``OpenAIEndpoint`` (retries on timeouts, 429 and 5xx, a circuit breaker), ``VISION_TIMEOUT`` for
the whole call; when it fails the picture keeps its text alone and the turn is never held up.
"""

from __future__ import annotations

import base64
import logging
from typing import Any, Protocol

import httpx

from ..errors import LLMError
from ..lang.text import scrub
from ..providers.llm import strip_reasoning
from ..providers.openai_api import OpenAIEndpoint, open_http_client
from ..settings import MemorySettings

log = logging.getLogger(__name__)

PROMPT = "用一句中文（不超过40个字）描述这张图片的内容，只写看到的东西；图中的文字不用抄写。"
DESCRIPTION_MAX_CHARS = 80
# One retry: a picture left without its description still keeps the text read from it.
VISION_MAX_RETRIES = 1
_KINDS = (
    (b"\x89PNG", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF8", "image/gif"),
    (b"BM", "image/bmp"),
)


def media_type(picture: bytes) -> str:
    if picture[:4] == b"RIFF" and picture[8:12] == b"WEBP":
        return "image/webp"
    return next((kind for magic, kind in _KINDS if picture.startswith(magic)), "image/png")


class Describer(Protocol):
    """One sentence about a picture, or ``""`` when none can be had."""

    async def describe(self, picture: bytes) -> str: ...


class NoDescriptions:
    """No vision model configured."""

    async def describe(self, picture: bytes) -> str:
        return ""


class VisionDescriber:
    """Describes pictures with one OpenAI-compatible vision model; never raises."""

    def __init__(self, endpoint: OpenAIEndpoint, model: str, *, deadline: float) -> None:
        self._endpoint = endpoint
        self._model = model
        self._deadline = deadline

    async def describe(self, picture: bytes) -> str:
        data = base64.b64encode(picture).decode("ascii")
        payload: dict[str, Any] = {
            "model": self._model,
            "stream": False,
            "max_tokens": 120,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": PROMPT},
                        {
                            "type": "image_url",
                            "image_url": {"url": f"data:{media_type(picture)};base64,{data}"},
                        },
                    ],
                }
            ],
        }
        try:
            response = await self._endpoint.post(
                "chat/completions", payload, deadline=self._deadline
            )
            return self._sentence(response)
        except LLMError as exc:
            log.warning("picture described by its text alone: %s", exc)
            return ""

    def _sentence(self, response: httpx.Response) -> str:
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise LLMError(
                f"vision model answer unreadable: {self._endpoint.excerpt(response.text)}"
            ) from exc
        if not isinstance(content, str):
            raise LLMError("vision model answer is not text")
        text = " ".join(strip_reasoning(scrub(content)).split()).strip("。. ")
        return text[:DESCRIPTION_MAX_CHARS]

    async def aclose(self) -> None:
        await self._endpoint.aclose()


def build_describer(settings: MemorySettings) -> VisionDescriber | NoDescriptions:
    """The ``VISION_*`` model, or :class:`NoDescriptions` while ``VISION_MODEL`` is empty."""
    if not settings.vision_model:
        return NoDescriptions()
    client = open_http_client(
        base_url=settings.vision_base_url,
        api_key=settings.vision_api_key,
        timeout=settings.vision_timeout,
        setting_prefix="VISION",
        max_connections=4,
    )
    endpoint = OpenAIEndpoint(
        client, label="vision model", error=LLMError, max_retries=VISION_MAX_RETRIES
    )
    return VisionDescriber(endpoint, settings.vision_model, deadline=settings.vision_timeout)
