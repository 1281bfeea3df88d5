"""Just-stored turns embedded a moment later, many at a time, off the reply's path.

A chat message costs the embedder its own turn and the bot's reply as passages besides the
query. Only the query is needed before the model answers: the new turn is in the short-term
memory of the next messages anyway, and the keyword channel finds it at once. So the
conversation stores its turns without a vector and hands them here; ``DeferredEmbeddings``
collects them for ``window`` seconds (with a chat model's usual delay, the turns get embedded
while it writes the reply rather than before it is asked), embeds up to ``max_batch`` of them
in one call and writes the vectors in one go. A batch that cannot be embedded or written is
left to the backfill (``DialogueUpkeep.backfill_embeddings``): the rows stay without a vector
in the database, so nothing depends on this queue surviving a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

import numpy as np

from ..errors import MemoryCoreError

log = logging.getLogger(__name__)

EmbedTexts = Callable[[Sequence[str]], Awaitable[np.ndarray]]
WriteVectors = Callable[[Sequence[int], np.ndarray], Awaitable[None]]


class DeferredEmbeddings:
    """Embeds and writes the vectors of rows handed to ``add``, in batches, in the background.

    ``on_failure`` is called when a batch is given up (the backfill then takes those rows).
    """

    def __init__(
        self,
        *,
        embed: EmbedTexts,
        write: WriteVectors,
        on_failure: Callable[[], None],
        window: float,
        max_batch: int,
    ) -> None:
        self._embed = embed
        self._write = write
        self._on_failure = on_failure
        self._window = window
        self._max_batch = max_batch
        self._pending: dict[int, str] = {}  # row id -> indexed text, in arrival order
        self._in_flight: set[int] = set()
        self._worker: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    @staticmethod
    async def wait_window(seconds: float) -> None:
        """Wait out the collection window. A seam for tests, which replace it with a gate
        they open when they choose: a window raced against a loaded machine is no test."""
        await asyncio.sleep(seconds)

    def __len__(self) -> int:
        return len(self._pending) + len(self._in_flight)

    def __contains__(self, row_id: object) -> bool:
        """Whether the row's vector is still to come from here (the backfill skips it)."""
        return row_id in self._pending or row_id in self._in_flight

    def add(self, row_id: int, text: str) -> None:
        """Embed row ``row_id`` (whose indexed text is ``text``) soon."""
        self._pending[row_id] = text
        self._idle.clear()
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._work())

    async def settled(self) -> None:
        """Wait until every row handed in so far has its vector or was given up."""
        await self._idle.wait()

    async def aclose(self) -> None:
        """Stop; rows not yet embedded keep no vector until the next start's backfill."""
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
        self._pending.clear()
        self._in_flight.clear()
        self._idle.set()

    async def _work(self) -> None:
        try:
            while self._pending:
                if self._window > 0 and len(self._pending) < self._max_batch:
                    await self.wait_window(self._window)
                batch = list(self._pending.items())[: self._max_batch]
                for row_id, _ in batch:
                    del self._pending[row_id]
                self._in_flight.update(row_id for row_id, _ in batch)
                try:
                    await self._embed_batch(batch)
                finally:
                    self._in_flight.clear()
        finally:
            if not self._pending:
                self._idle.set()

    async def _embed_batch(self, batch: list[tuple[int, str]]) -> None:
        ids = [row_id for row_id, _ in batch]
        try:
            vectors = await self._embed([text for _, text in batch])
            await self._write(ids, vectors)
        except MemoryCoreError as exc:  # the embedder's or the database's
            log.warning("%d turn(s) left to the embedding backfill: %s", len(ids), exc)
            self._on_failure()
