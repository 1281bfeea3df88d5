"""``PictureReader``: the pictures of stored turns read off the reply path, on a bounded queue.

For each message with pictures the plugin calls :meth:`PictureReader.start` (before the turn
is stored, so a reply may wait a moment for its own picture) and, once the turn is stored,
:meth:`PictureReader.follow`: when the readings are in, they are kept in ``turn_pictures`` and
the turn's text becomes ``[图片：文字 …]``, searched anew by keywords and by meaning.

Bounds, so a sticker flood in a busy group cannot take the CPU or the memory:

* ``MEMORY_IMAGE_WORKERS`` pictures are read at once, the rest wait in a queue of
  ``QUEUE_SIZE`` messages; a message finding it full is not read (its turn keeps
  ``[图片]``);
* at most ``MEMORY_IMAGE_PER_MINUTE`` pictures are fetched a minute; a picture seen before (by
  the client's digest name or the bytes' hash) is not fetched or read again, within or over
  the budget;
* a sticker is read only when it is at most ``STICKER_MAX_BYTES``.

Reading yields to replies: with ``DEFER_MAX`` above 0, a queued picture waits for a
quiet moment (no reply under way for a second, ``memory_core.traffic``) before it is fetched and
read, but at most that many seconds after it was queued; then it is read anyway. A busy chat
thus puts its pictures' reading off instead of slowing its replies. A reply waiting for its own
picture (``MEMORY_IMAGE_REPLY_WAIT``) has it read at once (``start(urgent=True)``), before the
pictures put off.

A picture not read for a passing reason (the budget, a full queue, a timeout) is tried again by
:meth:`PictureReader.retry_skipped`, a round about every minute run by the memory's maintenance
(:meth:`PictureReader.background_steps`, which ``open_chat_bot`` adds to its schedule)
that takes only what the minute's budget and the queue leave, from the turn's stored segments,
while the turn is at most ``RETRY_WINDOW`` old and each picture at most ``READ_ATTEMPTS`` times
in all. A sticker declined for its size is not tried again.

Nothing is read for a person who opted out of memory in that chat, and nothing is written for
a turn that is gone (撤回 while its picture was read). Failures never reach the caller: a
picture that cannot be fetched or read leaves the turn as it was stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from ..background import RepeatedStep
from ..errors import MemoryCoreError, PictureError
from ..models import MemoryTurn, TurnInput
from ..storage.opt_outs import chat_name
from ..traffic import ReplyTraffic
from .fetch import PictureFetcher
from .ocr import RapidOcrReader, TextReader
from .reading import (
    DECLINED,
    READ,
    REFUSED,
    SKIPPED,
    PictureJob,
    PictureRef,
    Reading,
    StoredLocator,
)
from .segments import Locator, picture_refs
from .store import (
    KnownPicture,
    PgPictureStore,
    PictureRecord,
    RetryTurn,
    StoredReading,
)
from .text import derived_label, picture_text, with_labels
from .vision import Describer, NoDescriptions, build_describer

if TYPE_CHECKING:
    from ..dialogue.writing import TurnWriter
    from ..parts import MemoryParts
    from ..settings import MemorySettings
    from ..storage.database_handle import Database


log = logging.getLogger(__name__)

LOCATE_TIMEOUT = 5.0
# How long a stored turn's follow-up waits for its readings: longer than any queue wait the
# bounds allow, shorter than forever.
FOLLOW_TIMEOUT = 600.0
# A retry round about every minute (the budget's own period), a few pictures at a time.
RETRY_INTERVAL = 60.0
RETRY_BATCH = 8
# The bounds of the bot's reader. They were settings no operator changed; the figures behind
# them are in bench/RESULTS.md ("Pictures remembered", 2026-12-04/05):
# messages waiting for their pictures; past it a message is not read (a flood, not a chat)
QUEUE_SIZE = 32
# a sticker is read only when this small (the big ones are animations without text)
STICKER_MAX_BYTES = 300_000
# characters of a picture's text written into its turn: a screenshot's gist, not a page
TEXT_MAX_CHARS = 300
# a picture not read for a passing reason is tried again while its turn is this young,
# this many times in all, the first included
RETRY_WINDOW = 6 * 3600.0
READ_ATTEMPTS = 3
# how long a queued picture waits for a quiet moment before it is read anyway: measured with
# 20 % picture messages, 30 s took the reading off the replies' path (bench/RESULTS.md,
# "reading that yields to replies", 2026-12-05)
DEFER_MAX = 30.0

Labels = list[tuple[str, str]]


class MinuteBudget:
    """At most ``limit`` takes in any 60 seconds."""

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._limit = limit
        self._clock = clock
        self._taken: deque[float] = deque()

    def take(self) -> bool:
        if self.remaining() == 0:
            return False
        self._taken.append(self._clock())
        return True

    def remaining(self) -> int:
        """How many takes the last 60 seconds leave."""
        now = self._clock()
        while self._taken and now - self._taken[0] >= 60.0:
            self._taken.popleft()
        return max(self._limit - len(self._taken), 0)


class PictureReader:
    """Reads the pictures of a bot's turns in the background (see the module docstring)."""

    def __init__(
        self,
        *,
        database: Database,
        writer: TurnWriter,
        fetcher: PictureFetcher,
        text_reader: TextReader,
        workers: int,
        queue_size: int,
        per_minute: int,
        sticker_max_bytes: int,
        text_max_chars: int,
        describer: Describer | None = None,
        retry_window: float = 6 * 3600.0,
        max_attempts: int = 3,
        close_text_reader: bool = False,
        defer_max: float = 0.0,
        traffic: ReplyTraffic | None = None,
        clock: Callable[[], float] = time.monotonic,
        locator: StoredLocator | None = None,
    ) -> None:
        """``close_text_reader``: :meth:`aclose` also closes ``text_reader`` (its own).
        ``defer_max``: how long a queued picture may wait for no reply to be under way in
        ``traffic`` (the engine's); 0 or no ``traffic``: read as soon as a worker is free.
        ``database``: where the pictures and their readings are kept; ``writer``: the
        dialogue's, which rewrites a turn's text with its pictures' labels."""
        self._database = database
        self._writer = writer
        self._fetcher = fetcher
        self._text_reader = text_reader
        self._close_text_reader = close_text_reader
        self._workers_wanted = workers
        # each message's pictures, with the session key its log lines name and when queued
        self._queue: asyncio.Queue[tuple[PictureJob, str, float]] = asyncio.Queue(queue_size)
        # ``workers`` pictures read at once: the workers' and the urgent ones' together
        self._reading = asyncio.Semaphore(workers)
        self._urgent: set[asyncio.Task[None]] = set()
        self._defer_max = defer_max if traffic is not None else 0.0
        self._traffic = traffic
        self._budget = MinuteBudget(per_minute, clock)
        self._sticker_max = sticker_max_bytes
        self._text_max = text_max_chars
        self._describer: Describer = describer if describer is not None else NoDescriptions()
        self._workers: list[asyncio.Task[None]] = []
        self._follow_ups: set[asyncio.Task[None]] = set()
        self._retry_window = retry_window
        self._max_attempts = max_attempts
        self._retrying: asyncio.Task[None] | None = None
        # Where a stored turn's picture without a URL is (the plugin's get_image, handed to
        # ``open_chat_bot``).
        self.locator: StoredLocator | None = locator

    @classmethod
    def from_settings(
        cls,
        settings: MemorySettings,
        parts: MemoryParts,
        traffic: ReplyTraffic | None = None,
        locator: StoredLocator | None = None,
    ) -> PictureReader:
        """The reader ``MEMORY_IMAGE_*`` describe, with the offline OCR, over the memory's
        database and writer; ``traffic``: the engine's replies, which the reading yields to
        (``DEFER_MAX``); ``locator``: where a stored picture without a URL is (the front end's
        client)."""
        return cls(
            database=parts.database,
            writer=parts.writer,
            fetcher=PictureFetcher(allowed_hosts=settings.memory_image_allowed_hosts),
            text_reader=RapidOcrReader(),
            workers=settings.memory_image_workers,
            queue_size=QUEUE_SIZE,
            per_minute=settings.memory_image_per_minute,
            sticker_max_bytes=STICKER_MAX_BYTES,
            text_max_chars=TEXT_MAX_CHARS,
            describer=build_describer(settings),
            retry_window=RETRY_WINDOW,
            max_attempts=READ_ATTEMPTS,
            close_text_reader=True,
            defer_max=DEFER_MAX,
            traffic=traffic,
            locator=locator,
        )

    def _now(self) -> float:
        """When a job is queued, on the clock its deadline is waited for on."""
        return self._traffic.now() if self._traffic is not None else 0.0

    @property
    def queued(self) -> int:
        return self._queue.qsize()

    async def aclose(self) -> None:
        """Stop the workers, the follow-ups and a retry round under way, close the HTTP client
        (and the text reader when it is this reader's own)."""
        tasks = [*self._workers, *self._urgent, *self._follow_ups]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers.clear()
        await self._fetcher.aclose()
        closing_reader = getattr(self._text_reader, "close", None)
        if self._close_text_reader and closing_reader is not None:
            await asyncio.to_thread(closing_reader)
        closing = getattr(self._describer, "aclose", None)
        if closing is not None:
            await closing()

    # ----------------------------------------------------------------- the caller's side

    async def start(
        self, turn: TurnInput, refs: Sequence[PictureRef], *, urgent: bool = False
    ) -> PictureJob | None:
        """Queue the message's pictures for reading; ``None`` when there is nothing to read,
        the person opted out of memory in that chat, or the database cannot say. ``urgent``:
        a reply waits for them, so they are read at once, not put off for quiet."""
        if not refs:
            return None
        try:
            allowed = await self._database.store(PgPictureStore).may_read(
                turn.user_id, chat_name(turn.group_id)
            )
        except MemoryCoreError as exc:
            log.info("pictures of session %s not read: %s", turn.session_key, exc)
            return None
        if not allowed:
            return None
        job = PictureJob(refs=tuple(refs))
        if urgent and self._defer_max > 0:
            # Not behind the pictures put off in the queue; bounded like the queue.
            if len(self._urgent) < self._queue.maxsize:
                task = asyncio.create_task(self._run(job, turn.session_key))
                self._urgent.add(task)
                task.add_done_callback(self._urgent.discard)
                return job
        else:
            self._start_workers()
            try:
                self._queue.put_nowait((job, turn.session_key, self._now()))
                return job
            except asyncio.QueueFull:
                pass
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
            job, session_key, queued_at = await self._queue.get()
            try:
                if self._traffic is not None and self._defer_max > 0:
                    # A reply under way goes first, for at most ``defer_max`` seconds.
                    await self._traffic.quiet_by(queued_at + self._defer_max)
                await self._run(job, session_key)
            finally:
                self._queue.task_done()

    async def _run(self, job: PictureJob, session_key: str) -> None:
        """Read ``job``'s pictures (on one of the ``workers`` slots) and hand them over."""
        try:
            async with self._reading:
                readings = [await self._read(ref) for ref in job.refs]
        except MemoryCoreError as exc:  # the database went away meanwhile
            log.info("pictures of session %s not read: %s", session_key, exc)
            readings = [Reading(r, SKIPPED, reason=str(exc)) for r in job.refs]
        except Exception as exc:  # a bug must not stop the worker; the turn stays as it is
            log.exception("pictures of session %s could not be read", session_key)
            readings = [Reading(r, SKIPPED, reason=repr(exc)) for r in job.refs]
        if not job.done.done():
            job.done.set_result(readings)

    async def _read(self, ref: PictureRef) -> Reading:
        limit = self._fetcher.max_bytes
        if ref.declared_size is not None and ref.declared_size > limit:
            return Reading(ref, REFUSED, reason=f"{ref.declared_size} bytes")
        if ref.sticker and ref.declared_size is not None and ref.declared_size > self._sticker_max:
            return Reading(ref, DECLINED, reason="a large sticker")
        store = self._database.store(PgPictureStore)
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
            return Reading(ref, DECLINED, sha256=digest, reason="a large sticker")
        known = await self._known(store, None, digest)
        if known is not None:
            return self._seen(ref, known, digest)
        try:
            lines = await self._text_reader.read(data)
        except PictureError as exc:  # a stalled or dead worker: tried again by a retry round
            return Reading(ref, REFUSED if exc.lasting else SKIPPED, sha256=digest, reason=str(exc))
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
        # The labels went into the turn's text before it was stored, or go in now.
        labels = None if job.in_text else PictureJob.labels(readings)
        try:
            await self._keep(stored.id, readings, labels)
        except MemoryCoreError as exc:
            log.warning("readings of turn %d's pictures not kept: %s", stored.id, exc)

    async def _keep(self, turn_id: int, readings: Sequence[Reading], labels: Labels | None) -> None:
        """Record the readings; then, unless ``labels`` is ``None``, put them into the turn's
        text (``with_labels``: each ``(what the text shows now, what it is to show)``)."""
        store = self._database.store(PgPictureStore)
        records = [
            PictureRecord(r.ref.position, r.ref.file_key, r.sha256, r.status, r.text, r.description)
            for r in readings
        ]
        if not await store.record(turn_id, records) or labels is None:
            return  # the turn is gone, or its text needs nothing
        current = await store.turn_text(turn_id)
        if current is None:
            return
        content = with_labels(current.content, labels)
        if content is None:
            return  # nothing was read, the labels are in already, or the text was edited
        await self._set_text(turn_id, current.content, content)

    # ----------------------------------------------------------------- retries

    def background_steps(self) -> tuple[RepeatedStep, ...]:
        """The retry round, as a step of the memory's maintenance (``open_chat_bot`` adds it
        to ``TemporalMemory.daily``): none when retries are off."""
        if self._retry_window <= 0 or self._max_attempts <= 1:
            return ()
        every = timedelta(seconds=RETRY_INTERVAL)
        return (RepeatedStep("picture retries", self._retry_beside, every),)

    async def _retry_beside(self) -> None:
        """Start a retry round beside the maintenance round, not in it: a round waits for its
        pictures (up to ``FOLLOW_TIMEOUT``), and the spool and the backfills must not wait
        with it. A round still under way is not started twice."""
        if self._retrying is not None and not self._retrying.done():
            return
        self._retrying = asyncio.create_task(self._retry_round())
        self._follow_ups.add(self._retrying)  # cancelled by aclose, waited for by settled
        self._retrying.add_done_callback(self._follow_ups.discard)

    async def _retry_round(self) -> None:
        try:
            await self.retry_skipped()
        except MemoryCoreError as exc:  # the database away: said by the maintenance itself
            log.debug("picture retries postponed: %s", exc)
        except Exception as exc:  # the next round tries again; nothing here is lost
            log.error("picture retry round failed", exc_info=exc)

    async def retry_skipped(self) -> int:
        """One retry round: the pictures of stored turns not read for a passing reason, as
        many as the minute's budget, the queue's free room and ``RETRY_BATCH`` allow, read on
        the same workers and written into their turns. How many were tried."""
        room = min(self._budget.remaining(), self._queue.maxsize - self._queue.qsize(), RETRY_BATCH)
        if room <= 0 or self._retry_window <= 0:
            return 0
        store = self._database.store(PgPictureStore)
        due = await store.retry_due(self._max_attempts, self._retry_window, room)
        queued: list[tuple[RetryTurn, PictureJob, list[PictureRef]]] = []
        for turn in due:
            locator = (
                None if self.locator is None else functools.partial(self.locator, turn.self_id)
            )
            refs = picture_refs(turn.segments, locator)
            again = [ref for ref in refs if ref.position in turn.positions]
            if len(again) != len(turn.positions):  # the stored segments say otherwise now
                await store.record(turn.turn_id, self._lost(turn, refs))
                continue
            job = PictureJob(refs=tuple(again))
            self._start_workers()
            try:
                self._queue.put_nowait((job, turn.session_key, self._now()))
            except asyncio.QueueFull:  # fresh pictures came first
                break
            queued.append((turn, job, refs))
        for turn, job, refs in queued:
            try:
                readings = await asyncio.wait_for(asyncio.shield(job.done), FOLLOW_TIMEOUT)
            except asyncio.TimeoutError:
                continue
            before = await store.readings(turn.turn_id)
            await self._keep(turn.turn_id, readings, self._relabels(refs, before, readings))
        return sum(len(job.refs) for _, job, _ in queued)

    def _locator_of(self, turn: RetryTurn) -> Locator | None:
        if self.locator is None:
            return None
        return functools.partial(self.locator, turn.self_id)

    @staticmethod
    def _lost(turn: RetryTurn, refs: Sequence[PictureRef]) -> list[PictureRecord]:
        known = {ref.position for ref in refs}
        return [PictureRecord(p, None, None, REFUSED, "") for p in turn.positions if p not in known]

    @staticmethod
    def _relabels(
        refs: Sequence[PictureRef],
        before: dict[int, StoredReading],
        readings: Sequence[Reading],
    ) -> Labels:
        """Each picture of the turn as its text shows it now, and as it is to show it: the
        pictures read now from their placeholder to their label, the others as they are."""
        now = {r.ref.position: r for r in readings}
        labels: Labels = []
        for ref in refs:
            if ref.position in now:
                labels.append((ref.placeholder, now[ref.position].label))
                continue
            earlier = before.get(ref.position)
            shown = (
                ref.placeholder
                if earlier is None
                else derived_label(ref.placeholder, earlier.text, earlier.description)
            )
            labels.append((shown, shown))
        return labels

    async def _set_text(self, turn_id: int, before: str, content: str) -> None:
        """The turn's text with its pictures' labels, searched anew as a written turn is
        (``TurnWriter.rewrite``); only while the text is still ``before``: an edit in the
        console meanwhile wins."""
        await self._writer.rewrite(turn_id, content, expected=before)
