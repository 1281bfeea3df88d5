"""Concurrent embedding requests share one model call (micro-batching).

Every message costs the local model a few short texts (the turn, the query, the reply), each
from its own session. One call per text pays the model's fixed cost per call (a thread hop,
OpenMP start-up and barriers in every layer) that many times; one call for the texts of every
session waiting at that moment pays it once. ``MicroBatcher`` collects texts for as long as
the model is busy with the previous batch (and, if asked, ``max_wait`` seconds more, unless
``max_batch`` are waiting), then makes one call and hands each caller its own rows.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import EmbeddingError

Run = Callable[[list[str]], Awaitable[np.ndarray]]


class ModelSlot:
    """Turns at one model: whoever holds it runs a batch; the others wait, queries first.

    A query is embedded while someone waits for a reply; a passage (a stored turn) can wait.
    So when the model comes free, waiting ``queries`` get it before waiting ``passages``, each
    kind in arrival order (under load, stored turns' vectors trail the replies instead of
    pushing queries past their deadline). Use ``async with slot.queries:`` /
    ``slot.passages``.
    """

    def __init__(self) -> None:
        self._busy = False
        self._waiting: tuple[deque[asyncio.Future[None]], ...] = (deque(), deque())
        self.queries = _Turn(self, 0)
        self.passages = _Turn(self, 1)

    async def _acquire(self, rank: int) -> None:
        if not self._busy:
            self._busy = True
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[rank].append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._release()  # handed the slot just as the caller gave up: pass it on
            else:
                self._waiting[rank].remove(turn)
            raise

    def _release(self) -> None:
        for waiting in self._waiting:
            while waiting:
                turn = waiting.popleft()
                if not turn.done():
                    turn.set_result(None)  # the slot stays busy: handed over
                    return
        self._busy = False


class _Turn:
    def __init__(self, slot: ModelSlot, rank: int) -> None:
        self._slot = slot
        self._rank = rank

    async def __aenter__(self) -> None:
        await self._slot._acquire(self._rank)

    async def __aexit__(self, *exc: object) -> None:
        self._slot._release()


@dataclass
class _Request:
    texts: list[str]
    future: asyncio.Future[np.ndarray]


class MicroBatcher:
    """Embeds the texts of concurrent ``embed`` calls together with one ``run`` call.

    ``slot`` is held during each ``run`` (share one between the batchers of one model, so a
    batch forms while the model works on another). A request larger than ``max_batch`` is cut
    into batches of that size, so a bulk job never holds the model for long. A caller that
    stops waiting (cancelled, timed out) before its batch starts costs the model nothing. When
    a batch of several requests fails, each request is tried alone, so one text the model
    cannot embed fails only its own caller.
    """

    def __init__(
        self,
        run: Run,
        *,
        slot: asyncio.Lock | asyncio.Semaphore | _Turn,
        max_batch: int = 32,
        max_wait: float = 0.0,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._run = run
        self._slot = slot
        self._max_batch = max_batch
        self._max_wait = max_wait
        self._pending: deque[_Request] = deque()
        self._queued = 0  # texts in _pending
        self._full = asyncio.Event()
        self._worker: asyncio.Task[None] | None = None
        self._closed = False

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The rows of ``texts``, in order; raises what ``run`` raised for them."""
        if self._closed:
            raise EmbeddingError("the embedder is closed")
        loop = asyncio.get_running_loop()
        requests = [
            _Request(list(texts[start : start + self._max_batch]), loop.create_future())
            for start in range(0, len(texts), self._max_batch)
        ]
        for request in requests:
            self._pending.append(request)
            self._queued += len(request.texts)
        if self._queued >= self._max_batch:
            self._full.set()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._work())
        try:
            parts = [await request.future for request in requests]
        except BaseException:
            for request in requests:  # the rest is not wanted either
                request.future.cancel()
            raise
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    async def aclose(self) -> None:
        """Stop the worker; callers still waiting get ``EmbeddingError``."""
        self._closed = True
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        while self._pending:
            _fail(self._pending.popleft(), EmbeddingError("the embedder is closed"))
        self._queued = 0

    async def _work(self) -> None:
        while self._pending:
            if self._queued < self._max_batch and self._max_wait > 0:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._full.wait(), self._max_wait)
            async with self._slot:
                batch = self._take()
                if batch:
                    await self._embed_batch(batch)

    def _take(self) -> list[_Request]:
        """The waiting requests that fit one batch (at least one), callers gone skipped."""
        batch: list[_Request] = []
        size = 0
        while self._pending:
            request = self._pending[0]
            if batch and size + len(request.texts) > self._max_batch:
                break
            self._pending.popleft()
            self._queued -= len(request.texts)
            if not request.future.done():
                batch.append(request)
                size += len(request.texts)
        if self._queued < self._max_batch:
            self._full.clear()
        return batch

    async def _embed_batch(self, batch: list[_Request]) -> None:
        try:
            vectors = await self._run([text for request in batch for text in request.texts])
        except asyncio.CancelledError:  # aclose() while the model works on this batch
            for request in batch:
                _fail(request, EmbeddingError("the embedder is closed"))
            raise
        except Exception as exc:  # handed to the callers, whose error it is
            if len(batch) == 1:
                _fail(batch[0], exc)
                return
            for request in batch:
                await self._embed_batch([request])
            return
        start = 0
        for request in batch:
            end = start + len(request.texts)
            if not request.future.done():
                request.future.set_result(vectors[start:end])
            start = end


def _fail(request: _Request, exc: BaseException) -> None:
    if not request.future.done():
        request.future.set_exception(exc)
