"""The daily counters (``memory_daily_stats``): features bump them, ``/memstat`` reads them."""

from __future__ import annotations

from datetime import date

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from .pg import PgStore

# A counter met again adds to its day's value.
_ADD_TO_EXISTING = (
    "ON CONFLICT (day, metric) DO UPDATE SET value = memory_daily_stats.value + EXCLUDED.value"
)


def bump_sql(day: str, metric: str, value: str) -> str:
    """The statement adding ``value`` to counter ``metric`` of ``day`` (SQL parameters such as
    ``$1``; a constant of the caller, never input): to end a caller's own statement, so that
    its change and the count cost one round trip."""
    return f"""
INSERT INTO memory_daily_stats (day, metric, value) VALUES ({day}, {metric}, {value})
{_ADD_TO_EXISTING}
"""


# Several counters of one day ($2 names, distinct; $3 values) in one statement.
SQL_BUMP_METRICS = f"""
INSERT INTO memory_daily_stats (day, metric, value)
SELECT $1, m.metric, m.value FROM unnest($2::text[], $3::bigint[]) AS m(metric, value)
{_ADD_TO_EXISTING}
"""

SQL_METRIC_TOTALS = """
SELECT metric, sum(value)::bigint AS value FROM memory_daily_stats WHERE day >= $1 GROUP BY metric
"""

SQL_METRIC_BY_DAY = """
SELECT day, value FROM memory_daily_stats WHERE metric = $1 AND day >= $2 ORDER BY day
"""

SQL_METRICS_SINCE = """
SELECT day, metric, value FROM memory_daily_stats WHERE day >= $1 ORDER BY day, metric
"""


async def bump_on(
    conn: PoolConnectionProxy[asyncpg.Record], day: date, metrics: dict[str, int]
) -> None:
    """Add ``metrics`` to their counters of ``day`` on ``conn`` (in its transaction, if any),
    in one statement; zeros are skipped."""
    counted = {name: value for name, value in metrics.items() if value}
    if counted:
        await conn.execute(SQL_BUMP_METRICS, day, list(counted), list(counted.values()))


class PgCounterStore(PgStore):
    """Bumps and reads the daily counters. The features that count take it from the database
    handle (``database.store(PgCounterStore)``) beside their own store; a statement that must
    count in its own round trip ends with ``bump_sql`` or runs ``bump_on`` on its connection."""

    async def bump(self, day: date, metrics: dict[str, int]) -> None:
        async with self._connection() as conn:
            await bump_on(conn, day, metrics)

    async def metric_totals(self, since: date) -> dict[str, int]:
        async with self._connection() as conn:
            return {r["metric"]: r["value"] for r in await conn.fetch(SQL_METRIC_TOTALS, since)}

    async def metric_by_day(self, metric: str, since: date) -> list[tuple[date, int]]:
        async with self._connection() as conn:
            return [
                (r["day"], r["value"]) for r in await conn.fetch(SQL_METRIC_BY_DAY, metric, since)
            ]

    async def metrics_since(self, since: date) -> list[tuple[date, str, int]]:
        """Every counter's (day, name, value) since ``since``, oldest first (the charts)."""
        async with self._connection() as conn:
            rows = await conn.fetch(SQL_METRICS_SINCE, since)
        return [(r["day"], r["metric"], r["value"]) for r in rows]
