"""Scores finished exchanges in the background and sets how long they are kept.

The queue lives in the database (``evaluation_queue``), so exchanges waiting at a shutdown or a
crash are scored after the restart. Nothing here runs on the reply path: the chat flow only
enqueues. A backlog is scored several exchanges per model call; concurrency is bounded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from ..background import RoundLoop
from ..dialogue.source_store import PgSourceStore
from ..errors import LLMError
from ..models import MemoryTurn
from ..storage.database_handle import Database
from .evaluator import Evaluator, Exchange, heuristic_score
from .retention import RetentionPolicy
from .store import ClaimedEvaluation, PendingEvaluation, PgEvaluationStore

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3
RETRY_DELAY = timedelta(minutes=1)
IDLE_INTERVAL = 60.0

# Names of the daily counters (table memory_daily_stats).
EVALUATED = "evaluation_ok"
FAILED = "evaluation_failed"
NOT_KEPT = "not_kept"
PURGED = "purged"


def band_metric(name: str) -> str:
    return f"band_{name}"


class EvaluationWorker:
    """Scores finished exchanges in the background and settles their retention."""

    def __init__(
        self,
        *,
        database: Database,
        evaluator: Evaluator,
        policy: RetentionPolicy,
        tz: ZoneInfo,
        concurrency: int,
        batch_size: int,
    ) -> None:
        self._database = database
        self.evaluator = evaluator
        self.policy = policy
        self._tz = tz
        self._batch_size = batch_size
        self._concurrency = concurrency
        self._slots = asyncio.Semaphore(concurrency)
        self._rounds = RoundLoop(self.run_once, interval=IDLE_INTERVAL, name="memory evaluation")
        self._round_lock = asyncio.Lock()

    def _store(self) -> PgEvaluationStore:
        return self._database.store(PgEvaluationStore)

    @property
    def evaluator_name(self) -> str:
        return self.evaluator.name

    def start(self) -> None:
        self._rounds.start()

    async def aclose(self) -> None:
        await self._rounds.stop()
        await self.evaluator.aclose()

    async def enqueue(self, user_turn_id: int, assistant_turn_id: int) -> None:
        """Durably queue one exchange and wake the worker; returns at once."""
        await self._store().enqueue(user_turn_id, assistant_turn_id)
        self._rounds.wake()

    async def keep_unanswered(self, turn: MemoryTurn) -> None:
        """Give a message the bot could not answer (the chat model failed: no exchange to
        judge) the expiry of its rule-of-thumb score's band, as it would have had with the
        heuristic evaluator; unscored, it would be kept for ever."""
        score = heuristic_score(Exchange(turn.content, ""))
        expires_at = self.policy.expires_at(score, turn.created_at)
        await self._database.store(PgSourceStore).set_score((turn.id, turn.id), score, expires_at)

    async def run_once(self, now: datetime | None = None) -> int:
        """Score every exchange that is due; returns how many were settled (scored or failed)."""
        async with self._round_lock:
            settled = 0
            while True:
                moment = now or datetime.now(timezone.utc)
                # Claimed by the database's clock unless a caller moves time (tests).
                claimed = await self._store().claim_due(now, self._batch_size * self._concurrency)
                due = await self._with_texts(claimed)
                if not due:
                    return settled
                # One exchange a call when there is no backlog, batches when there is.
                size = 1 if len(due) <= self._concurrency else self._batch_size
                chunks = [due[i : i + size] for i in range(0, len(due), size)]
                results = await asyncio.gather(*(self._settle(c, moment, now) for c in chunks))
                settled += sum(results)
                if sum(results) == 0:
                    return settled  # everything was postponed; try again later

    async def _with_texts(self, claimed: Sequence[ClaimedEvaluation]) -> list[PendingEvaluation]:
        """The claimed exchanges with their turns' texts (an item whose turn is gone is left
        out: the queue row went with it)."""
        wanted = {i for c in claimed for i in (c.user_turn_id, c.assistant_turn_id)}
        turns = await self._database.store(PgSourceStore).turns_by_id(wanted)
        pending = []
        for c in claimed:
            user, reply = turns.get(c.user_turn_id), turns.get(c.assistant_turn_id)
            if user is not None and reply is not None:
                pending.append(
                    PendingEvaluation(
                        c.assistant_turn_id,
                        c.user_turn_id,
                        c.attempts,
                        user.content,
                        reply.content,
                        reply.created_at,
                        reply.session_key,
                    )
                )
        return pending

    async def _settle(
        self, chunk: Sequence[PendingEvaluation], now: datetime, moved: datetime | None
    ) -> int:
        """Score ``chunk`` at ``now``; ``moved``: the time a caller set (``None``: the
        database's clock decides when a failed item is due again)."""
        async with self._slots:
            exchanges = [Exchange(item.user_text, item.assistant_text) for item in chunk]
            try:
                scores = await self.evaluator.score(exchanges)
            except LLMError as exc:
                return await self._failed_call(chunk, now, moved, exc)
        store = self._store()
        day = now.astimezone(self._tz).date()
        scores = (list(scores) + [None] * len(chunk))[: len(chunk)]  # a short answer is a failure
        for item, score in zip(chunk, scores, strict=True):
            if score is None:
                log.warning(
                    "evaluation of session %s unreadable; exchange kept without a score",
                    item.session_key,
                )
                await store.finish(item, metrics={FAILED: 1}, day=day)
                continue
            band = self.policy.band_for(score)
            expires_at = self.policy.expires_at(score, item.created_at)
            metrics = {EVALUATED: 1, band_metric(band.name): 1}
            if not band.kept:
                metrics[NOT_KEPT] = 1
            async with self._database.transaction() as tx:
                turns = (item.user_turn_id, item.assistant_turn_id)
                await tx.store(PgSourceStore).set_score(turns, score, expires_at)
                await tx.store(PgEvaluationStore).finish(item, metrics=metrics, day=day)
            log.info(
                "memory evaluation of session %s: %d -> %s", item.session_key, score, band.name
            )
        return len(chunk)

    async def _failed_call(
        self,
        chunk: Sequence[PendingEvaluation],
        now: datetime,
        moved: datetime | None,
        exc: Exception,
    ) -> int:
        store = self._store()
        day = now.astimezone(self._tz).date()
        settled = 0
        for item in chunk:
            if item.attempts + 1 >= MAX_ATTEMPTS:
                # Given up: keep the exchange without a score (never lose it), and count it.
                await store.finish(item, metrics={FAILED: 1}, day=day)
                settled += 1
            else:
                await store.postpone(item, RETRY_DELAY * (item.attempts + 1), moved)
        log.warning(
            "evaluator failed for %d exchange(s) of session(s) %s (%d given up, kept unscored): %s",
            len(chunk),
            ", ".join(sorted({item.session_key for item in chunk})),
            settled,
            exc,
        )
        return settled


class EvaluationOff:
    """Evaluation while it is off (no evaluator or no retention bands): nothing is queued or
    scored, so the memory need not ask whether it is on."""

    evaluator_name = "off"

    def start(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    async def enqueue(self, user_turn_id: int, assistant_turn_id: int) -> None:
        pass

    async def keep_unanswered(self, turn: MemoryTurn) -> None:
        pass

    async def run_once(self, now: datetime | None = None) -> int:
        return 0
