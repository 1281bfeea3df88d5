"""All SQL of the evaluation queue (migration 002), behind ``PgEvaluationStore``. The scores,
expiries and purge of the turns themselves are their stores' (``dialogue.source_store``,
``dialogue.upkeep_store``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from ..storage.counters import bump_on
from ..storage.pg import PgStore

SQL_ENQUEUE_EVALUATION = """
INSERT INTO evaluation_queue (assistant_turn_id, user_turn_id) VALUES ($1, $2)
ON CONFLICT (assistant_turn_id) DO NOTHING
"""

# Claims due items for one worker: rows another process is claiming are skipped, and claimed
# ones are leased (not due again for $3) so that two bots on one database never score the
# same exchange; a worker that dies mid-way leaves them due again when the lease ends.
# "Now" is the database's clock ($1 NULL), the one clock every bot on it shares: with each
# bot's own, a bot whose clock runs ahead by more than the lease took the others' leased
# items as due and judged them a second time. Tests pass $1 to move time themselves.
SQL_CLAIM_EVALUATIONS = """
WITH due AS (
    SELECT assistant_turn_id FROM evaluation_queue
    WHERE not_before <= coalesce($1::timestamptz, now())
    ORDER BY enqueued_at, assistant_turn_id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE evaluation_queue q SET not_before = coalesce($1::timestamptz, now()) + $3::interval
    FROM due WHERE q.assistant_turn_id = due.assistant_turn_id
    RETURNING q.assistant_turn_id, q.user_turn_id, q.attempts, q.enqueued_at
)
SELECT assistant_turn_id, user_turn_id, attempts FROM claimed
ORDER BY enqueued_at, assistant_turn_id
"""
CLAIM_LEASE = timedelta(minutes=10)

SQL_COUNT_EVALUATIONS = "SELECT count(*) FROM evaluation_queue"

SQL_DEQUEUE_EVALUATION = "DELETE FROM evaluation_queue WHERE assistant_turn_id = $1"

SQL_POSTPONE_EVALUATION = """
UPDATE evaluation_queue SET attempts = attempts + 1,
    not_before = coalesce($3::timestamptz, now()) + $2::interval
WHERE assistant_turn_id = $1
"""


@dataclass(frozen=True)
class ClaimedEvaluation:
    """A queue item claimed for this worker: the exchange by its two turns' ids."""

    assistant_turn_id: int
    user_turn_id: int
    attempts: int


@dataclass(frozen=True)
class PendingEvaluation:
    assistant_turn_id: int
    user_turn_id: int
    attempts: int
    user_text: str
    assistant_text: str
    created_at: datetime
    session_key: str = ""  # named in the log lines of its evaluation


class PgEvaluationStore(PgStore):
    """The evaluation queue and the counters of its outcomes."""

    async def enqueue(self, user_turn_id: int, assistant_turn_id: int) -> None:
        async with self._connection() as conn:
            await conn.execute(SQL_ENQUEUE_EVALUATION, assistant_turn_id, user_turn_id)

    async def claim_due(self, now: datetime | None, limit: int) -> list[ClaimedEvaluation]:
        """Up to ``limit`` items due at ``now`` (``None``: the database's clock), claimed for
        this worker (see ``SQL_CLAIM_EVALUATIONS``); each is then finished or postponed."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_CLAIM_EVALUATIONS, now, limit, CLAIM_LEASE)
        return [
            ClaimedEvaluation(r["assistant_turn_id"], r["user_turn_id"], r["attempts"])
            for r in records
        ]

    async def pending_count(self) -> int:
        async with self._connection() as conn:
            return int(await conn.fetchval(SQL_COUNT_EVALUATIONS))

    async def finish(
        self,
        item: PendingEvaluation,
        *,
        metrics: dict[str, int],
        day: date,
    ) -> None:
        """Take the item off the queue and count its outcome (the turns' score is written by
        their store, in the caller's transaction)."""
        async with self._transaction() as conn:
            await conn.execute(SQL_DEQUEUE_EVALUATION, item.assistant_turn_id)
            await bump_on(conn, day, metrics)

    async def postpone(
        self, item: PendingEvaluation, delay: timedelta, now: datetime | None = None
    ) -> None:
        """Count a failed attempt and make the item due ``delay`` after ``now`` (``None``: the
        database's clock)."""
        async with self._connection() as conn:
            await conn.execute(SQL_POSTPONE_EVALUATION, item.assistant_turn_id, delay, now)
