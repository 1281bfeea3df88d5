"""Distils sessions in the background: every N exchanges and when a session goes idle.

The chat flow only calls :meth:`ExtractionWorker.note_exchange` (one upsert) after storing an
exchange; extraction itself never runs on the reply path. The bookkeeping lives in the
database (``distilled_sessions``: a watermark of distilled turns and a count of exchanges
since), so what is due survives restarts. Raw turns are never touched: a failed extraction
leaves them in place, is counted, and is retried with backoff; after ``MAX_ATTEMPTS`` the
batch is skipped (counted as given up). Sessions are distilled concurrently, bounded.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from ..accounts import account_of_key, serving
from ..background import RoundLoop
from ..dialogue.source_store import PgSourceStore, SourceTurn
from ..errors import EmbeddingError, LLMError
from ..models import generate_session_key
from ..storage.counters import PgCounterStore
from ..storage.database_handle import Database
from .extraction import Extractor
from .keeper import MemoryKeeper
from .memory import SaveOutcome
from .store import PgDistilledStore, SessionDue

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
RETRY_DELAY = timedelta(minutes=5)
CHECK_INTERVAL = 60.0
KNOWN_ITEMS = 30  # current facts / preferences shown to the model, most important first
MIN_TURNS_FOR_SUMMARY = 4
DUE_BATCH = 50

# Names of the daily counters (table memory_daily_stats).
EXTRACTION_OK = "extraction_ok"
EXTRACTION_FAILED = "extraction_failed"
EXTRACTION_GIVEN_UP = "extraction_given_up"
EXTRACTION_REJECTED = "extraction_rejected"
EXTRACTION_PARSED = "extraction_parsed"
DISTILLED_ADDED = "distilled_added"
DISTILLED_CONFIRMED = "distilled_confirmed"
DISTILLED_MERGED = "distilled_merged"
DISTILLED_SUPERSEDED = "distilled_superseded"


@dataclass(frozen=True)
class ExtractionReport:
    """What distilling one session did.

    ``rejected``: answers that could not be read (their part of the batch is lost, the turns
    stay); ``failed``: the model failed, retried later; ``given_up``: failed too often, the
    batch is skipped; ``skipped``: no user turn to read; ``discarded``: some of the turns were
    deleted while they were distilled, so nothing was saved (the rest are read again).
    """

    session_key: str
    turns: int = 0
    saved: SaveOutcome = field(default_factory=SaveOutcome)
    rejected: tuple[str, ...] = ()
    failed: bool = False
    given_up: bool = False
    skipped: bool = False
    discarded: bool = False


@dataclass(frozen=True)
class _Batch:
    last_turn_id: int  # the watermark once this batch is done
    more: bool  # undistilled turns remain beyond it


class ExtractionWorker:
    def __init__(
        self,
        *,
        database: Database,
        keeper: MemoryKeeper,
        extractor: Extractor,
        tz: ZoneInfo,
        every_turns: int,
        idle_minutes: float,
        concurrency: int,
        max_turns: int,
        settle_seconds: float = 0.0,
    ) -> None:
        self._database = database
        self.keeper = keeper
        self.extractor = extractor
        self._tz = tz
        self.every_turns = every_turns
        self.idle = timedelta(minutes=idle_minutes)
        self._max_turns = max_turns
        # A turn younger than this may still be recalled (撤回) by its sender: it is not
        # distilled yet, so a quick 撤回 leaves nothing behind.
        self.settle = timedelta(seconds=settle_seconds)
        self._slots = asyncio.Semaphore(concurrency)
        self._concurrency = concurrency
        self._running: set[str] = set()
        self._rounds = RoundLoop(self.run_once, interval=CHECK_INTERVAL, name="memory extraction")
        self._round_lock = asyncio.Lock()

    def _store(self) -> PgDistilledStore:
        return self._database.store(PgDistilledStore)

    def _counters(self) -> PgCounterStore:
        return self._database.store(PgCounterStore)

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        self._rounds.start()

    async def aclose(self) -> None:
        await self._rounds.stop()
        await self.extractor.aclose()

    # ---------------------------------------------------------------- the public calls

    async def note_exchange(
        self, user_id: int, group_id: int | None, now: datetime | None = None
    ) -> bool:
        """Count one stored exchange of a session; True when that made the session due (the
        background task is woken; nothing is extracted here)."""
        now = now or datetime.now(timezone.utc)
        key = generate_session_key(user_id, group_id)
        pending = await self._store().note_exchange(key, user_id, group_id, now)
        if pending >= self.every_turns:
            self._rounds.wake()
            return True
        return False

    async def run_once(self, now: datetime | None = None) -> int:
        """Distil every due session (N exchanges noted, or idle with exchanges waiting);
        returns how many sessions were distilled (successfully or given up)."""
        async with self._round_lock:
            moment = now or datetime.now(timezone.utc)
            done = 0
            while True:
                due = [
                    s
                    for s in await self._store().claim_due_sessions(
                        now=now,  # None: the database's clock, which every bot shares
                        every=self.every_turns,
                        idle=self.idle,
                        limit=DUE_BATCH,
                    )
                    if s.session_key not in self._running
                ]
                if not due:
                    return done
                reports = await asyncio.gather(*(self._guarded(s, moment) for s in due))
                settled = sum(1 for r in reports if not r.failed)
                done += settled
                if settled == 0 or len(due) < DUE_BATCH:
                    return done

    async def extract_session(
        self, user_id: int, group_id: int | None, now: datetime | None = None
    ) -> ExtractionReport:
        """Distil one session's undistilled turns now, due or not (tests, admin tools)."""
        moment = now or datetime.now(timezone.utc)
        store = self._store()
        key = generate_session_key(user_id, group_id)
        state = await store.session_state(key)
        if state is None:
            await store.note_exchange(key, user_id, group_id, moment, turns=0)
            state = await store.session_state(key)
            assert state is not None
        return await self._guarded(state, moment)

    # ---------------------------------------------------------------- one session

    async def _guarded(self, session: SessionDue, now: datetime) -> ExtractionReport:
        if session.session_key in self._running:
            return ExtractionReport(session.session_key, failed=True)
        self._running.add(session.session_key)
        try:
            # What is saved of it goes to the session's QQ account's memory (memory_core.accounts).
            with serving(account_of_key(session.session_key)):
                async with self._slots:
                    return await self._extract(session, now)
        finally:
            self._running.discard(session.session_key)

    async def _extract(self, session: SessionDue, now: datetime) -> ExtractionReport:
        day = now.astimezone(self._tz).date()
        turns = await self._database.store(PgSourceStore).undistilled_turns(
            session.session_key, session.last_turn_id, now, self._max_turns + 1
        )
        settled_before = now - self.settle
        unsettled = [t for t in turns if t.created_at > settled_before]
        if unsettled:
            turns = [t for t in turns if t.id < min(u.id for u in unsettled)]
        more = len(turns) > self._max_turns or bool(unsettled)
        turns = turns[: self._max_turns]
        user_turns = sum(1 for t in turns if t.role == "user")
        last_id = max((t.id for t in turns), default=session.last_turn_id)
        batch = _Batch(last_id, more)
        if user_turns == 0:
            await self._finish(session, batch, now)
            await self._wait_for_settling(session, unsettled)
            return ExtractionReport(session.session_key, skipped=True)

        known_facts = await self.keeper.recall_by_type(
            session.user_id,
            session.group_id,
            "facts",
            limit=KNOWN_ITEMS,
            now=now,
            by_importance=True,
        )
        known_preferences = await self.keeper.recall_by_type(
            session.user_id,
            session.group_id,
            "preferences",
            limit=KNOWN_ITEMS,
            now=now,
            by_importance=True,
        )
        try:
            extraction = await self.extractor.extract(
                turns,
                known_facts=known_facts,
                known_preferences=known_preferences,
                summarise=len(turns) >= MIN_TURNS_FOR_SUMMARY,
            )
        except LLMError as exc:
            return await self._failed(session, now, exc, batch)
        try:
            saved = await self.keeper.save(
                extraction.items,
                user_id=session.user_id,
                group_id=session.group_id,
                source_turn_ids=[t.id for t in turns],
                stated_at=max(t.created_at for t in turns),
                sources_must_exist=True,
            )
        except EmbeddingError as exc:  # the keeper stores unembedded rows; this is a safety net
            return await self._failed(session, now, exc, batch)
        if saved.discarded:
            # A /forget or 撤回 took some of these turns while the model read them: nothing
            # drawn from the batch is kept, and the watermark stays, so the turns that are left
            # (none after /forget, which also drops this bookkeeping) are read again.
            log.info("extraction of a session discarded: its turns were deleted meanwhile")
            await self._store().defer_session(session.session_key, now)  # due again at once
            return ExtractionReport(session.session_key, discarded=True)
        await self._finish(session, batch, now)
        await self._wait_for_settling(session, unsettled)
        answers = 3 if len(turns) >= MIN_TURNS_FOR_SUMMARY else 2
        await self._counters().bump(
            day,
            {
                EXTRACTION_OK: 1,
                EXTRACTION_PARSED: answers - len(extraction.rejected),
                EXTRACTION_REJECTED: len(extraction.rejected),
                DISTILLED_ADDED: saved.added,
                DISTILLED_CONFIRMED: saved.confirmed,
                DISTILLED_MERGED: saved.merged,
                DISTILLED_SUPERSEDED: saved.superseded,
            },
        )
        if extraction.rejected:
            log.warning(
                "extraction answer(s) unreadable for a session, skipped: %s",
                ", ".join(extraction.rejected),
            )
        log.info(
            "distilled %d turn(s): %d added, %d confirmed, %d merged, %d superseded",
            len(turns),
            saved.added,
            saved.confirmed,
            saved.merged,
            saved.superseded,
        )
        return ExtractionReport(
            session.session_key, turns=len(turns), saved=saved, rejected=extraction.rejected
        )

    async def _wait_for_settling(self, session: SessionDue, unsettled: list[SourceTurn]) -> None:
        """Keep the session due, but not before its oldest held-back turn has settled."""
        if unsettled:
            oldest = min(t.created_at for t in unsettled)
            await self._store().defer_session(session.session_key, oldest + self.settle)

    async def _finish(self, session: SessionDue, batch: _Batch, now: datetime) -> None:
        await self._store().finish_session(
            session.session_key,
            last_turn_id=batch.last_turn_id,
            taken=session.pending_turns,
            more=batch.more,
            every=self.every_turns,
            now=now,
        )

    async def _failed(
        self, session: SessionDue, now: datetime, exc: Exception, batch: _Batch
    ) -> ExtractionReport:
        store = self._store()
        day = now.astimezone(self._tz).date()
        if session.attempts + 1 >= MAX_ATTEMPTS:
            # Give this batch up (its turns stay stored); later turns are distilled as usual.
            await self._finish(session, batch, now)
            await self._counters().bump(day, {EXTRACTION_FAILED: 1, EXTRACTION_GIVEN_UP: 1})
            log.warning("extraction given up after %d attempts: %s", MAX_ATTEMPTS, exc)
            return ExtractionReport(session.session_key, given_up=True)
        await store.postpone_session(
            session.session_key, now + RETRY_DELAY * (session.attempts + 1)
        )
        await self._counters().bump(day, {EXTRACTION_FAILED: 1})
        log.warning("extraction failed, retried later: %s", exc)
        return ExtractionReport(session.session_key, failed=True)


class ExtractionOff:
    """Extraction while it is off (MEMORY_DISTILLED_ENABLED or EXTRACTION_ENABLED false, or no
    model): counts nothing, distils nothing, so its callers need not ask whether it is on.
    ``reason`` says why, in Chinese, for /memstat."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def start(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def note_exchange(
        self, user_id: int, group_id: int | None, now: datetime | None = None
    ) -> bool:
        return False

    async def run_once(self, now: datetime | None = None) -> int:
        return 0

    async def extract_session(
        self, user_id: int, group_id: int | None, now: datetime | None = None
    ) -> None:
        return None
