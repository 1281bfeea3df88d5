"""Small stand-ins that implement the core's protocols without inheriting anything: the one
chat model every test and benchmark records prompts with, and a hashing embedder."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from memory_core.distill.memory import DistilledMemory


class HashingEmbedder:
    """Deterministic bag-of-character-bigrams embedder: texts sharing characters are close.

    Good enough to make recall tests exact and fast; the real models are tested separately.
    """

    def __init__(self, dim: int = 384, model: str = "test/hashing-bigrams") -> None:
        self.dim = dim
        self.model = model
        self.fail = False
        self.calls = 0

    def _vector(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dim, dtype=np.float32)
        grams = [text[i : i + 2] for i in range(max(1, len(text) - 1))]
        for gram in grams:
            digest = hashlib.blake2b(gram.encode("utf-8", "replace"), digest_size=8).digest()
            vector[int.from_bytes(digest[:4], "little") % self.dim] += 1.0
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm else vector

    async def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        from memory_core.errors import EmbeddingError

        self.calls += 1
        if self.fail:
            raise EmbeddingError("test embedder told to fail")
        return np.stack([self._vector(t) for t in texts]) if texts else np.zeros((0, self.dim))

    async def embed_query(self, text: str) -> np.ndarray:
        from memory_core.errors import EmbeddingError

        self.calls += 1
        if self.fail:
            raise EmbeddingError("test embedder told to fail")
        return self._vector(text)

    async def aclose(self) -> None:
        return None


Prompt = list[dict[str, str]]


class RecordingModel:
    """A ``ChatModel`` that records every prompt and answers ``answer``.

    ``answer`` is a text, or a function of the prompts recorded so far (this one included) for
    an answer that changes. ``fail``, when set, is raised instead of answering (after the prompt
    is recorded). ``gate``, when set, holds every answer until the test sets it (a model still
    thinking for as long as the test wants, never a delay to race); ``started`` is set as soon
    as a prompt arrives.
    """

    def __init__(self, answer: str | Callable[[Sequence[Prompt]], str] = "好的") -> None:
        self.answer = answer
        self.prompts: list[Prompt] = []
        self.fail: Exception | None = None
        self.gate: asyncio.Event | None = None
        self.started = asyncio.Event()

    async def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> str:
        self.prompts.append([dict(m) for m in messages])
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return self.answer if isinstance(self.answer, str) else self.answer(self.prompts)

    async def aclose(self) -> None:
        return None

    def text(self, index: int = -1) -> str:
        """The prompt ``index`` (the last by default) as one text, its messages one a line."""
        return "\n".join(m["content"] for m in self.prompts[index])


def stored_fact(content: str, at: datetime, **fields: Any) -> DistilledMemory:
    """A stored fact of user 1's private chat, as the store returns it; ``fields`` override."""
    values: dict[str, Any] = dict(
        id=1,
        kind="facts",
        session_key="1",
        user_id=1,
        group_id=None,
        content=content,
        category="personal_info",
        confidence=0.9,
        strength=None,
        evidence=(),
        key_topics=(),
        sentiment=None,
        action_items=(),
        source_turn_ids=(),
        first_seen=at,
        last_confirmed=at,
        times_mentioned=1,
        importance=0.9,
        access_count=0,
        last_accessed_at=None,
        valid_until=None,
        superseded_by=None,
        created_at=at,
    )
    values.update(fields)
    return DistilledMemory(**values)
