"""``PictureReader``: the pictures of stored turns read off the reply path, on a bounded queue.

For each message with pictures the plugin calls :meth:`PictureReader.start` (before the turn
is stored, so a reply may wait a moment for its own picture) and, once the turn is stored,
:meth:`PictureReader.follow`: when the readings are in, they are kept in ``turn_pictures`` and
the turn's text becomes ``[图片：文字 …]``, searched anew by keywords and by meaning.

Bounds, so a sticker flood in a busy group cannot take the CPU or the memory:

* ``MEMORY_IMAGE_WORKERS`` pictures are read at once, the rest wait in a queue of
  ``MEMORY_IMAGE_QUEUE`` messages; a message finding it full is not read (its turn keeps
  ``[图片]``);
* at most ``MEMORY_IMAGE_PER_MINUTE`` pictures are fetched a minute; a picture seen before (by
  the client's digest name or the bytes' hash) is not fetched or read again, within or over
  the budget;
* a sticker is read only when it is at most ``MEMORY_IMAGE_STICKER_MAX_BYTES``.

Nothing is read for a person who opted out of memory in that chat, and nothing is written for
a turn that is gone (撤回 while its picture was read). Failures never reach the caller: a
picture that cannot be fetched or read leaves the turn as it was stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import tzinfo
from typing import TYPE_CHECKING, Protocol

from ..errors import EmbeddingError, MemoryCoreError, PictureError
from ..lang.indexed import indexed_text
from ..lang.keywords import document_terms
from ..lang.timerange import referred_range
from ..models import MemoryTurn, TurnInput
from ..storage.opt_outs import chat_name
from .fetch import PictureFetcher
from .ocr import RapidOcrReader, TextReader
from .reading import READ, REFUSED, SKIPPED, PictureJob, PictureRef, Reading
from .store import KnownPicture, PgPictureStore, PictureRecord, TextUpdate, TurnText
from .text import picture_text, with_labels
from .vision import Describer, NoDescriptions, build_describer

if TYPE_CHECKING:
    from ..lang.tokens import TokenCounter
    from ..parts import MemoryParts
    from ..providers.embedding import Embedder
    from ..settings import MemorySettings
    from ..storage.database_handle import Database


class PictureMemory(Protocol):
    """What reading pictures uses of the memory (``TemporalMemory`` is one): the database,
    the writer's deferred vectors, and how a turn is indexed and embedded."""

    @property
    def database(self) -> Database: ...
    @property
    def settings(self) -> MemorySettings: ...
    @property
    def parts(self) -> MemoryParts: ...
    @property
    def embedder(self) -> Embedder: ...
    @property
    def token_counter(self) -> TokenCounter: ...
    @property
    def text_form(self) -> int: ...
    @property
    def tz(self) -> tzinfo: ...
    @property
    def embedding_model(self) -> str: ...

    async def settle_embeddings(self, timeout: float | None = None) -> None: ...


log = logging.getLogger(__name__)

LOCATE_TIMEOUT = 5.0
# How long a stored turn's follow-up waits for its readings: longer than any queue wait the
# bounds allow, shorter than forever.
FOLLOW_TIMEOUT = 600.0


class MinuteBudget:
    """At most ``limit`` takes in any 60 seconds."""

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = limit
        self._clock = clock
        self._taken: deque[float] = deque()

    def take(self) -> bool:
        now = self._clock()
        while self._taken and now - self._taken[0] >= 60.0:
            self._taken.popleft()
        if len(self._taken) >= self._limit:
            return False
        self._taken.append(now)
        return True


class PictureReader:
    """Reads the pictures of a bot's turns in the background (see the module docstring)."""

    def __init__(
        self,
        *,
        memory: PictureMemory,
        fetcher: PictureFetcher,
        text_reader: TextReader,
        workers: int,
        queue_size: int,
        per_minute: int,
        sticker_max_bytes: int,
        text_max_chars: int,
        describer: Describer | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._memory = memory
        self._fetcher = fetcher
        self._text_reader = text_reader
        self._workers_wanted = workers
        self._queue: asyncio.Queue[tuple[PictureJob, TurnInput]] = asyncio.Queue(queue_size)
        self._budget = MinuteBudget(per_minute, clock)
        self._sticker_max = sticker_max_bytes
        self._text_max = text_max_chars
        self._describer: Describer = describer if describer is not None else NoDescriptions()
        self._workers: list[asyncio.Task[None]] = []
        self._follow_ups: set[asyncio.Task[None]] = set()

    @classmethod
    def from_settings(cls, settings: MemorySettings, memory: PictureMemory) -> PictureReader:
        """The reader ``MEMORY_IMAGE_*`` describe, with the offline OCR."""
        return cls(
            memory=memory,
            fetcher=PictureFetcher(
                max_bytes=settings.memory_image_max_bytes,
                timeout=settings.memory_image_timeout,
                max_redirects=settings.memory_image_max_redirects,
            ),
            text_reader=RapidOcrReader(),
            workers=settings.memory_image_workers,
            queue_size=settings.memory_image_queue,
            per_minute=settings.memory_image_per_minute,
            sticker_max_bytes=settings.memory_image_sticker_max_bytes,
            text_max_chars=settings.memory_image_text_max_chars,
            describer=build_describer(settings),
        )

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    async def aclose(self) -> None:
        """Stop the workers and the follow-ups, close the HTTP client."""
        tasks = [*self._workers, *self._follow_ups]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers.clear()
        await self._fetcher.aclose()
        closing = getattr(self._describer, "aclose", None)
        if closing is not None:
            await closing()

    # ----------------------------------------------------------------- the caller's side

    async def start(self, turn: TurnInput, refs: Sequence[PictureRef]) -> PictureJob | None:
        """Queue the message's pictures for reading; ``None`` when there is nothing to read,
        the person opted out of memory in that chat, or the database cannot say."""
        if not refs:
            return None
        try:
            allowed = await self._memory.database.store(PgPictureStore).may_read(
                turn.user_id, chat_name(turn.group_id)
            )
        except MemoryCoreError as exc:
            log.info("pictures of session %s not read: %s", turn.session_key, exc)
            return None
        if not allowed:
            return None
        self._start_workers()
        job = PictureJob(refs=tuple(refs))
        try:
            self._queue.put_nowait((job, turn))
        except asyncio.QueueFull:
            log.info("picture queue full: %d picture(s) not read", len(refs))
            job.done.set_result([Reading(r, SKIPPED, reason="queue full") for r in refs])
        return job

    def follow(self, job: PictureJob, stored: MemoryTurn) -> None:
        """Once ``job`` is read, keep its readings with the stored turn and put the text into
        the turn (in the background)."""
        task = asyncio.create_task(self._follow(job, stored))
        self._follow_ups.add(task)
        task.add_done_callback(self._follow_ups.discard)

    async def settled(self) -> None:
        """Wait until every follow-up started so far is done (tests, shutdown)."""
        while self._follow_ups:
            await asyncio.gather(*list(self._follow_ups), return_exceptions=True)

    # ----------------------------------------------------------------- the workers

    def _start_workers(self) -> None:
        if not self._workers:
            self._workers = [asyncio.create_task(self._work()) for _ in range(self._workers_wanted)]

    async def _work(self) -> None:
        while True:
            job, turn = await self._queue.get()
            try:
                readings = [await self._read(ref) for ref in job.refs]
            except MemoryCoreError as exc:  # the database went away meanwhile
                log.info("pictures of session %s not read: %s", turn.session_key, exc)
                readings = [Reading(r, SKIPPED, reason=str(exc)) for r in job.refs]
            except Exception as exc:  # a bug must not stop the worker; the turn stays as it is
                log.exception("pictures of session %s could not be read", turn.session_key)
                readings = [Reading(r, SKIPPED, reason=repr(exc)) for r in job.refs]
            finally:
                self._queue.task_done()
            if not job.done.done():
                job.done.set_result(readings)

    async def _read(self, ref: PictureRef) -> Reading:
        limit = self._fetcher.max_bytes
        if ref.declared_size is not None and ref.declared_size > limit:
            return Reading(ref, REFUSED, reason=f"{ref.declared_size} bytes")
        if ref.sticker and ref.declared_size is not None and ref.declared_size > self._sticker_max:
            return Reading(ref, SKIPPED, reason="a large sticker")
        store = self._memory.database.store(PgPictureStore)
        known = await self._known(store, ref.file_key, None)
        if known is not None:
            return self._seen(ref, known, known.sha256)
        if not self._budget.take():
            return Reading(ref, SKIPPED, reason="over the per-minute budget")
        try:
            data = await self._fetch(ref)
        except PictureError as exc:
            return Reading(ref, REFUSED if exc.lasting else SKIPPED, reason=str(exc))
        digest = hashlib.sha256(data).digest()
        if ref.sticker and len(data) > self._sticker_max:
            return Reading(ref, SKIPPED, sha256=digest, reason="a large sticker")
        known = await self._known(store, None, digest)
        if known is not None:
            return self._seen(ref, known, digest)
        try:
            lines = await self._text_reader.read(data)
        except PictureError as exc:
            return Reading(ref, REFUSED, sha256=digest, reason=str(exc))
        description = await self._describer.describe(data)
        text = picture_text(lines, self._text_max)
        return Reading(ref, READ, text, digest, description=description)

    @staticmethod
    def _seen(ref: PictureRef, known: KnownPicture, digest: bytes | None) -> Reading:
        return Reading(
            ref, known.status, known.text, digest, "seen before", description=known.description
        )

    @staticmethod
    async def _known(
        store: PgPictureStore, file_key: str | None, digest: bytes | None
    ) -> KnownPicture | None:
        try:
            return await store.known(file_key=file_key, sha256=digest)
        except MemoryCoreError as exc:
            log.debug("earlier readings unavailable: %s", exc)
            return None

    async def _fetch(self, ref: PictureRef) -> bytes:
        url = ref.url
        if not url and ref.locate is not None:
            try:
                url = await asyncio.wait_for(ref.locate(), LOCATE_TIMEOUT)
            except asyncio.TimeoutError as exc:
                raise PictureError("the QQ client did not say where", lasting=False) from exc
        if not url:
            raise PictureError("the QQ client names no address for the picture")
        return await self._fetcher.fetch(url)

    # ----------------------------------------------------------------- the follow-up

    async def _follow(self, job: PictureJob, stored: MemoryTurn) -> None:
        try:
            readings = await asyncio.wait_for(asyncio.shield(job.done), FOLLOW_TIMEOUT)
        except asyncio.TimeoutError:
            log.info("pictures of turn %d not read in time", stored.id)
            return
        try:
            await self._keep(job, stored, readings)
        except MemoryCoreError as exc:
            log.warning("readings of turn %d's pictures not kept: %s", stored.id, exc)

    async def _keep(self, job: PictureJob, stored: MemoryTurn, readings: Sequence[Reading]) -> None:
        store = self._memory.database.store(PgPictureStore)
        records = [
            PictureRecord(r.ref.position, r.ref.file_key, r.sha256, r.status, r.text, r.description)
            for r in readings
        ]
        if not await store.record(stored.id, records) or job.in_text:
            return  # the turn is gone, or was stored with the labels already
        current = await store.turn_text(stored.id)
        if current is None:
            return
        content = with_labels(current.content, PictureJob.labels(readings))
        if content is None:
            return  # nothing was read, the labels are in already, or the text was edited
        await self._set_text(store, stored.id, current.content, content, current)

    async def _set_text(
        self, store: PgPictureStore, turn_id: int, before: str, content: str, current: TurnText
    ) -> None:
        memory = self._memory
        # The stored turn's own embedding may still be on its way (``embed_later``): it must
        # land before the new one, not after it.
        await memory.settle_embeddings(timeout=memory.settings.embedding_defer_window + 5.0)
        indexed = indexed_text(content, current.sender_name, memory.text_form)
        vector = None
        try:
            vector = (await memory.embedder.embed_passages([indexed]))[0]
        except EmbeddingError as exc:
            log.warning("turn %d's new text will be embedded later: %s", turn_id, exc)
            memory.parts.backfill_due.set()
        refers = referred_range(content, current.created_at, memory.tz)
        await store.set_text(
            TextUpdate(
                turn_id=turn_id,
                before=before,
                content=content,
                token_count=memory.token_counter.count(content),
                keywords=document_terms(indexed),
                text_form=memory.text_form,
                embedding=vector,
                embedding_model=memory.embedding_model if vector is not None else None,
                refers_start=refers.start if refers is not None else None,
                refers_end=refers.end if refers is not None else None,
            )
        )
