"""All SQL of the evaluation queue (migration 002), behind ``PgEvaluationStore``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from ..storage.counters import SQL_BUMP_METRIC, PgCounterStore
from ..storage.pg import rows_affected

SQL_ENQUEUE_EVALUATION = """
INSERT INTO evaluation_queue (assistant_turn_id, user_turn_id) VALUES ($1, $2)
ON CONFLICT (assistant_turn_id) DO NOTHING
"""

# Claims due items for one worker: rows another process is claiming are skipped, and claimed
# ones are leased (not due again until $3) so that two bots on one database never score the
# same exchange; a worker that dies mid-way leaves them due again when the lease ends.
SQL_CLAIM_EVALUATIONS = """
WITH due AS (
    SELECT assistant_turn_id FROM evaluation_queue
    WHERE not_before <= $1
    ORDER BY enqueued_at, assistant_turn_id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE evaluation_queue q SET not_before = $3
    FROM due WHERE q.assistant_turn_id = due.assistant_turn_id
    RETURNING q.assistant_turn_id, q.user_turn_id, q.attempts, q.enqueued_at
)
SELECT c.assistant_turn_id, c.user_turn_id, c.attempts,
       u.content AS user_text, a.content AS assistant_text, a.created_at, a.session_key
FROM claimed c
JOIN dialogues u ON u.id = c.user_turn_id
JOIN dialogues a ON a.id = c.assistant_turn_id
ORDER BY c.enqueued_at, c.assistant_turn_id
"""
CLAIM_LEASE = timedelta(minutes=10)

SQL_COUNT_EVALUATIONS = "SELECT count(*) FROM evaluation_queue"

# A turn the operator pinned keeps no expiry, whatever its score (migration 011).
SQL_SET_SCORE = """
UPDATE dialogues SET score = $3, expires_at = CASE WHEN pinned THEN NULL ELSE $4::timestamptz END
WHERE id = $1 OR id = $2
"""

SQL_DEQUEUE_EVALUATION = "DELETE FROM evaluation_queue WHERE assistant_turn_id = $1"

SQL_POSTPONE_EVALUATION = """
UPDATE evaluation_queue SET attempts = attempts + 1, not_before = $2 WHERE assistant_turn_id = $1
"""

SQL_PURGE_BATCH = """
DELETE FROM dialogues WHERE id IN (
    SELECT id FROM dialogues WHERE expires_at IS NOT NULL AND expires_at <= $1 AND NOT pinned
    ORDER BY expires_at LIMIT $2
)
"""


@dataclass(frozen=True)
class PendingEvaluation:
    assistant_turn_id: int
    user_turn_id: int
    attempts: int
    user_text: str
    assistant_text: str
    created_at: datetime
    session_key: str = ""  # named in the log lines of its evaluation


class PgEvaluationStore(PgCounterStore):
    """The evaluation queue, score/expiry updates of evaluated turns, and the purge."""

    async def enqueue(self, user_turn_id: int, assistant_turn_id: int) -> None:
        async with self._connection() as conn:
            await conn.execute(SQL_ENQUEUE_EVALUATION, assistant_turn_id, user_turn_id)

    async def claim_due(self, now: datetime, limit: int) -> list[PendingEvaluation]:
        """Up to ``limit`` due items, claimed for this worker (see ``SQL_CLAIM_EVALUATIONS``);
        each is then finished or postponed."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_CLAIM_EVALUATIONS, now, limit, now + CLAIM_LEASE)
        return [
            PendingEvaluation(
                r["assistant_turn_id"],
                r["user_turn_id"],
                r["attempts"],
                r["user_text"],
                r["assistant_text"],
                r["created_at"],
                r["session_key"],
            )
            for r in records
        ]

    async def pending_count(self) -> int:
        async with self._connection() as conn:
            return int(await conn.fetchval(SQL_COUNT_EVALUATIONS))

    async def finish(
        self,
        item: PendingEvaluation,
        *,
        score: int | None,
        expires_at: datetime | None,
        metrics: dict[str, int],
        day: date,
    ) -> None:
        """Record the outcome (score and expiry of both turns, or none) and count it."""
        async with self._connection() as conn, conn.transaction():
            if score is not None:
                await conn.execute(
                    SQL_SET_SCORE, item.user_turn_id, item.assistant_turn_id, score, expires_at
                )
            await conn.execute(SQL_DEQUEUE_EVALUATION, item.assistant_turn_id)
            await conn.executemany(
                SQL_BUMP_METRIC, [(day, name, value) for name, value in metrics.items()]
            )

    async def postpone(self, item: PendingEvaluation, not_before: datetime) -> None:
        async with self._connection() as conn:
            await conn.execute(SQL_POSTPONE_EVALUATION, item.assistant_turn_id, not_before)

    async def purge_batch(self, now: datetime, limit: int) -> int:
        """Delete up to ``limit`` expired rows in one short transaction."""
        async with self._connection() as conn:
            status = await conn.execute(SQL_PURGE_BATCH, now, limit)
        return rows_affected(status)
