"""The dialogue table as the write path and recall use it: inserting turns, and the reads of a
recall (anchors by vector, keyword, latest and referred time; their windows; a session's tail)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from ..accounts import account_of_key, key_account
from ..lang.indexed import ContextLine
from ..lang.keywords import tsquery_any
from ..models import MemoryTurn
from ..storage.opt_outs import not_opted_out
from ..storage.pg import PgStore, in_transaction, rows_affected
from .bad_rows import usable_time, usable_turn
from .columns import (
    COPY_TIMEOUT,
    INSERT_COLUMNS,
    SQL_SESSION_SIZE,
    TURN_COLUMNS,
    NewTurnRow,
    turn_from_record,
)
from .context_lines import context_before, contexts_for

# Nothing is stored of a person who opted out of this chat (storage.opt_outs).
SQL_INSERT_TURN = f"""
INSERT INTO dialogues ({", ".join(INSERT_COLUMNS)})
SELECT * FROM (
    VALUES ($1, $2::bigint, $3, $4::bigint, $5::bigint, $6, $7, $8, $9, $10::bigint,
            $11::jsonb, $12::halfvec, $13, $14::integer, $15::timestamptz,
            array_to_tsvector($16::text[]), $17::timestamptz, $18::timestamptz, $19::smallint)
) AS n ({", ".join(INSERT_COLUMNS)})
WHERE {not_opted_out("n")}
ON CONFLICT (message_uuid) DO NOTHING
RETURNING {TURN_COLUMNS}
"""

SQL_TURN_BY_UUID = f"SELECT {TURN_COLUMNS} FROM dialogues WHERE message_uuid = $1"

# A recalled turn a reply is about to quote, if it is still there (not forgotten, not expired)
# and of the session being answered (conversation.citation).
SQL_LIVE_TURN = f"""
SELECT {TURN_COLUMNS} FROM dialogues
WHERE id = $1 AND session_key = $2 AND (expires_at IS NULL OR expires_at > $3)
"""

SQL_CREATE_IMPORT_TABLE = """
CREATE TEMPORARY TABLE IF NOT EXISTS dialogue_import (
    message_uuid text, self_id bigint, session_key text, user_id bigint, group_id bigint,
    chat_type text, role text, content text, sender_name text, qq_message_id bigint,
    raw_segments jsonb, embedding halfvec, embedding_model text, token_count integer,
    created_at timestamptz, keywords text[], refers_start timestamptz, refers_end timestamptz,
    text_form smallint
) ON COMMIT DELETE ROWS
"""

# Keywords travel as text[] (COPY has no binary tsvector codec) and become a tsvector here.
_IMPORTED_VALUES = ", ".join(
    "array_to_tsvector(keywords)" if column == "keywords" else column for column in INSERT_COLUMNS
)

SQL_MOVE_IMPORTED = f"""
INSERT INTO dialogues ({", ".join(INSERT_COLUMNS)})
SELECT {_IMPORTED_VALUES} FROM dialogue_import i WHERE {not_opted_out("i")}
ON CONFLICT (message_uuid) DO NOTHING
"""


def _scoped(sql: str, alias: str = "") -> tuple[str, str]:
    """``sql`` for one session and for a whole shared group (``RecallScope``): its one
    ``{alias}session_key = $1`` becomes ``{alias}group_id = <the group of $1>`` (``$1`` is then
    ``"{account}{group_id}"``), read through the group index, and the row's QQ account that
    of ``$1`` (``memory_core.accounts``). Every member's session of that group in that
    account's memory, and nothing of another chat, is then read."""
    marker = f"{alias}session_key = $1"
    if sql.count(marker) != 1:
        raise ValueError(f"a scoped statement names its session exactly once: {sql}")
    group = (
        f"{alias}group_id = substr($1::text, strpos($1::text, '/') + 1)::bigint"
        f" AND {key_account(alias)} = substr($1::text, 1, strpos($1::text, '/'))"
    )
    return sql, sql.replace(marker, group)


SQL_SCOPE_SIZE = _scoped(SQL_SESSION_SIZE)

# Optional anchor filters shared by the channels: $6 roles, $7 required
# phrases (normalised, each must occur in the content), $8/$9 a time range [start, end),
# $10 sender names (the turns of the speakers a query names, ``lang.names``).
# The range bounds are plain comparisons so the session index can use them.
_ROLE_AND_PHRASE_FILTERS = """
  AND ($6::text[] IS NULL OR role = ANY($6::text[]))
  AND NOT EXISTS (SELECT 1 FROM unnest($7::text[]) AS k(phrase)
                  WHERE strpos(lower(normalize(content, NFKC)), k.phrase) = 0)
  AND ($10::text[] IS NULL OR sender_name = ANY($10::text[]))
"""

_ANCHOR_FILTERS = (
    _ROLE_AND_PHRASE_FILTERS
    + """
  AND created_at >= coalesce($8::timestamptz, '-infinity')
  AND created_at < coalesce($9::timestamptz, 'infinity')
"""
)

# Exact search: the session's live, embedded rows are read through the session index and
# sorted by distance. MATERIALIZED keeps the planner from trying the HNSW index, whose
# post-filtering could return fewer than k rows.
SQL_ANCHORS_EXACT = f"""
WITH candidates AS MATERIALIZED (
    SELECT id, created_at, embedding FROM dialogues
    WHERE session_key = $1 AND embedding_model = $2 AND embedding IS NOT NULL
      AND created_at <= $3 AND (expires_at IS NULL OR expires_at > $3) {_ANCHOR_FILTERS}
)
SELECT id, created_at, 1 - (embedding <=> $4) AS similarity
FROM candidates ORDER BY embedding <=> $4 LIMIT $5
"""

SQL_SCOPE_ANCHORS_EXACT = _scoped(SQL_ANCHORS_EXACT)

# Index search for large sessions: the expression must match the session's HNSW index.
SQL_ANCHORS_INDEX = (
    """
SELECT id, created_at, 1 - (embedding::halfvec({dim}) <=> $4::halfvec({dim})) AS similarity
FROM dialogues
WHERE session_key = $1 AND embedding_model = $2 AND embedding IS NOT NULL
  AND created_at <= $3 AND (expires_at IS NULL OR expires_at > $3)"""
    + _ANCHOR_FILTERS
    + """
ORDER BY embedding::halfvec({dim}) <=> $4::halfvec({dim}) LIMIT $5
"""
)

# Keyword search of one session: rows holding any query term ($4 tsquery over the
# terms $5), ranked by BM25 without term frequency (messages rarely repeat a word): the sum of
# the matched terms' IDF, with the session ($11 rows) as the collection, damped for long
# messages. The filters apply after the document frequencies, which describe the whole
# session. Only the $13 best rows are read again for their cosine to $12 (NULL: none).
# $14 weighs each term of $5 (same order): a term only the conversation's earlier lines have
# counts less than one of the message itself (``lang.keywords.weighted_conversation_terms``).
SQL_KEYWORD_CANDIDATES = f"""
WITH matches AS MATERIALIZED (
    SELECT id, created_at, role, content, sender_name, tsvector_to_array(keywords) AS terms
    FROM dialogues
    WHERE session_key = $1 AND keywords @@ $4::tsquery
      AND created_at <= $3 AND (expires_at IS NULL OR expires_at > $3)
),
df AS (
    SELECT term, count(*) AS n FROM matches, unnest(terms) AS term
    WHERE term = ANY($5::text[]) GROUP BY term
),
weights AS (SELECT * FROM unnest($5::text[], $14::float8[]) AS w(term, weight)),
scored AS (
    SELECT t.id, sum(w.weight * ln(1 + ($11::float8 - df.n + 0.5) / (df.n + 0.5))) AS idf
    FROM (SELECT id, unnest(terms) AS term FROM matches) t JOIN df USING (term)
    JOIN weights w USING (term)
    GROUP BY t.id
),
average AS (SELECT greatest(avg(cardinality(terms)), 1)::float8 AS len FROM matches),
-- The IDF mass of the whole query (terms found nowhere weigh the most).
query AS (
    SELECT sum(q.weight
               * ln(1 + ($11::float8 - coalesce(df.n, 0) + 0.5) / (coalesce(df.n, 0) + 0.5)))
           AS idf
    FROM weights q LEFT JOIN df USING (term)
),
-- How rare in this session the query's three rarest found terms are, 0-1 (ln(N/df) / ln N):
-- near 0 when even they are in most turns (chit-chat words), 1 for a term in one turn only.
rarity AS (
    SELECT coalesce(avg(r), 0) AS value FROM (
        SELECT CASE WHEN $11::float8 > 1 THEN ln($11::float8 / n) / ln($11::float8) ELSE 1 END
               AS r
        FROM df ORDER BY r DESC LIMIT 3
    ) rarest
),
best AS (
    SELECT id, created_at, s.idf / greatest(q.idf, 1e-9) AS coverage,
           s.idf * 2.2 / (1 + 1.2 * (0.25 + 0.75 * cardinality(terms) / a.len)) AS score
    FROM scored s JOIN matches USING (id) CROSS JOIN average a CROSS JOIN query q
    WHERE true {_ANCHOR_FILTERS}
    ORDER BY score DESC, created_at DESC, id DESC LIMIT $13
)
SELECT b.id, b.created_at, b.score, b.coverage, r.value AS rarity,
       CASE WHEN d.embedding_model = $2 AND $12::halfvec IS NOT NULL
            THEN 1 - (d.embedding <=> $12::halfvec) END AS similarity
FROM best b JOIN dialogues d ON d.id = b.id CROSS JOIN rarity r
ORDER BY b.score DESC, b.created_at DESC, b.id DESC
"""

SQL_SCOPE_KEYWORD_CANDIDATES = _scoped(SQL_KEYWORD_CANDIDATES)

# The session's live turns with their cosine to $4 when a query vector is given (else NULL).
_LIVE_TURNS_WITH_SIMILARITY = """
SELECT id, created_at,
       CASE WHEN embedding_model = $2 AND $4::halfvec IS NOT NULL
            THEN 1 - (embedding <=> $4::halfvec) END AS similarity
FROM dialogues
WHERE session_key = $1 AND created_at <= $3 AND (expires_at IS NULL OR expires_at > $3)
"""

# The session's latest live turns (for "刚才"), newest first, with the cosine to $4 if given.
SQL_LATEST_CANDIDATES = f"""{_LIVE_TURNS_WITH_SIMILARITY}\
  {_ANCHOR_FILTERS}
ORDER BY created_at DESC, id DESC LIMIT $5
"""

SQL_SCOPE_LATEST_CANDIDATES = _scoped(SQL_LATEST_CANDIDATES)

# The session's live turns that talk about a time inside the filters' range [$8, $9)
# (migration 008), nearest to $4 first when a query vector is given, else newest first.
SQL_REFERRING_CANDIDATES = f"""{_LIVE_TURNS_WITH_SIMILARITY}\
  AND refers_start IS NOT NULL AND refers_start < $9 AND refers_end > $8
  {_ROLE_AND_PHRASE_FILTERS}
ORDER BY embedding <=> $4::halfvec NULLS LAST, created_at DESC, id DESC LIMIT $5
"""

SQL_SCOPE_REFERRING_CANDIDATES = _scoped(SQL_REFERRING_CANDIDATES)

# Each anchor's ±window live turns of the anchor's own session, in (created_at, id) order: in
# a shared group, a member's words with the bot's replies to that member.
SQL_WINDOWS = f"""
SELECT a.anchor_id, w.* FROM unnest($2::bigint[], $3::timestamptz[]) AS a(anchor_id, anchor_at)
JOIN dialogues s ON s.id = a.anchor_id AND s.session_key = $1
CROSS JOIN LATERAL (
    (SELECT {TURN_COLUMNS} FROM dialogues d
     WHERE d.session_key = s.session_key AND d.created_at <= $4
       AND (d.expires_at IS NULL OR d.expires_at > $4)
       AND (d.created_at, d.id) < (a.anchor_at, a.anchor_id)
     ORDER BY d.created_at DESC, d.id DESC LIMIT $5)
    UNION ALL
    (SELECT {TURN_COLUMNS} FROM dialogues d
     WHERE d.session_key = s.session_key AND d.created_at <= $4
       AND (d.expires_at IS NULL OR d.expires_at > $4)
       AND (d.created_at, d.id) >= (a.anchor_at, a.anchor_id)
     ORDER BY d.created_at, d.id LIMIT $5 + 1)
) w
"""

SQL_SCOPE_WINDOWS = _scoped(SQL_WINDOWS, alias="s.")

# The sender names on the scope's last $3 turns up to $2 (a bounded read, newest first: who
# takes part in the chat now), for the names a query may mention (``lang.names``).
SQL_SPEAKER_NAMES = """
SELECT DISTINCT sender_name FROM (
    SELECT sender_name FROM dialogues
    WHERE session_key = $1 AND created_at <= $2
    ORDER BY created_at DESC, id DESC LIMIT $3
) recent WHERE sender_name IS NOT NULL
"""

SQL_SCOPE_SPEAKER_NAMES = _scoped(SQL_SPEAKER_NAMES)

# The short-term context: whatever the evaluator made of a turn, the conversation of the last
# minutes stays (expired rows outlive their expiry by that window, see ``purge_expired``).
SQL_RECENT = f"""
SELECT * FROM (
    SELECT {TURN_COLUMNS} FROM dialogues
    WHERE session_key = $1 AND created_at >= $2 AND created_at <= $3
    ORDER BY created_at DESC, id DESC LIMIT $4
) recent ORDER BY created_at, id
"""

SQL_LAST_TURN_AT = """
SELECT max(created_at) FROM dialogues WHERE session_key = $1 AND created_at <= $2
"""

# A message's first read, one round trip: the session's last turn time (as SQL_LAST_TURN_AT)
# and its short-term turns (as SQL_RECENT), both up to $3. With no recent turn the one row
# carries the time alone (its turn columns NULL).
SQL_SESSION_TAIL = f"""
SELECT last.at AS last_turn_at, recent.* FROM
    (SELECT max(created_at) AS at FROM dialogues WHERE session_key = $1 AND created_at <= $3) last
    LEFT JOIN LATERAL (
        SELECT {TURN_COLUMNS} FROM dialogues
        WHERE session_key = $1 AND created_at >= $2 AND created_at <= $3
        ORDER BY created_at DESC, id DESC LIMIT $4
    ) recent ON true
ORDER BY recent.created_at, recent.id
"""

# The same read for a message in a group whose short-term window is the group's: the member's
# last turn time (for stamping the message), and the short-term turns of every member of group
# $5 (what was said there in the last minutes, which every member sees in the chat) in the QQ
# account's memory $1 is in (memory_core.accounts), on the index of migration 015.
SQL_GROUP_TAIL = f"""
SELECT last.at AS last_turn_at, recent.* FROM
    (SELECT max(created_at) AS at FROM dialogues WHERE session_key = $1 AND created_at <= $3) last
    LEFT JOIN LATERAL (
        SELECT {TURN_COLUMNS} FROM dialogues
        WHERE group_id = $5 AND created_at >= $2 AND created_at <= $3
          AND {key_account()} = substr($1::text, 1, strpos($1::text, '/'))
        ORDER BY created_at DESC, id DESC LIMIT $4
    ) recent ON true
ORDER BY recent.created_at, recent.id
"""

# Sessions above this size get a plan made for their own key and terms (planning costs ~1 ms).
CUSTOM_PLAN_MIN_ROWS = 2_000


@dataclass(frozen=True)
class RecallScope:
    """Whose turns a search reads: one session (``"{group_id}:{user_id}"`` or
    ``"{user_id}"``), or every session of ``shared_group`` (``memory_core.recall.sharing``).
    A shared scope is never served by a per-session vector index: it is searched exactly."""

    session_key: str
    shared_group: int | None = None

    @property
    def key(self) -> str:
        """``$1`` of the scoped statements: the session key, or the group after the session's
        account namespace (``_scoped``)."""
        if self.shared_group is None:
            return self.session_key
        return f"{account_of_key(self.session_key)}{self.shared_group}"

    def pick(self, statements: tuple[str, str]) -> str:
        return statements[0] if self.shared_group is None else statements[1]


@dataclass(frozen=True)
class AnchorCandidate:
    id: int
    created_at: datetime
    similarity: float


@dataclass(frozen=True)
class AnchorFilters:
    """Optional limits on which turns may be anchors.

    ``roles``: only these roles; ``phrases``: normalised text each anchor must contain
    (see ``keywords.required_phrases``); ``start``/``end``: a time range ``[start, end)``;
    ``speakers``: only turns with one of these sender names (as stored).
    """

    roles: tuple[str, ...] | None = None
    phrases: tuple[str, ...] | None = None
    start: datetime | None = None
    end: datetime | None = None
    speakers: tuple[str, ...] | None = None

    def args(self) -> tuple[Any, ...]:
        return (
            list(self.roles) if self.roles else None,
            list(self.phrases) if self.phrases else None,
            self.start,
            self.end,
            list(self.speakers) if self.speakers else None,
        )


NO_FILTERS = AnchorFilters()


@dataclass(frozen=True)
class KeywordCandidate:
    """A keyword hit: its BM25-like score, the share of the query it matches, and its cosine
    to the query when one was given."""

    id: int
    created_at: datetime
    score: float
    similarity: float | None
    coverage: float = 1.0  # share of the query's IDF mass this turn matches (0-1)
    # how rare in the session the query's rarest found terms are (0-1; the same for every
    # hit of one search, see SQL_KEYWORD_CANDIDATES)
    rarity: float = 1.0


@dataclass(frozen=True)
class SessionTail:
    """What a new message of a session reads first: the time of the session's last turn and
    its short-term turns, oldest first (see ``session_tail``)."""

    last_turn_at: datetime | None
    recent: tuple[MemoryTurn, ...]


class PgRecallStore(PgStore):
    """Turns going in (one, or many by COPY) and the reads a recall and a new message make."""

    async def insert_turn(self, row: NewTurnRow) -> MemoryTurn | None:
        """Insert one turn; ``None`` when a turn with the same message_uuid exists."""
        async with self._connection() as conn:
            record = await conn.fetchrow(SQL_INSERT_TURN, *row.values())
        return turn_from_record(record) if record is not None else None

    async def context_before(self, row: NewTurnRow) -> ContextLine | None:
        """The line the new ``row`` answers (``context_lines``)."""
        async with self._connection() as conn:
            return await context_before(conn, row)

    async def contexts_for(self, rows: Sequence[NewTurnRow]) -> list[ContextLine | None]:
        """The line each of ``rows``, about to be inserted in this order, answers."""
        if not rows:
            return []
        async with self._connection() as conn:
            return await contexts_for(conn, rows)

    async def turn_by_uuid(self, message_uuid: str) -> MemoryTurn | None:
        async with self._connection() as conn:
            record = await conn.fetchrow(SQL_TURN_BY_UUID, message_uuid)
        return turn_from_record(record) if record is not None else None

    async def live_turn(self, turn_id: int, session_key: str, now: datetime) -> MemoryTurn | None:
        """Turn ``turn_id`` if it is of ``session_key`` and live at ``now``; else ``None``."""
        async with self._connection() as conn:
            record = await conn.fetchrow(SQL_LIVE_TURN, turn_id, session_key, now)
        return turn_from_record(record) if record is not None else None

    async def insert_many(self, rows: Sequence[NewTurnRow]) -> int:
        """Bulk insert with COPY through a temporary table; duplicates are skipped."""
        if not rows:
            return 0
        async with self._transaction() as conn:
            await conn.execute(SQL_CREATE_IMPORT_TABLE)
            await conn.copy_records_to_table(
                "dialogue_import",
                records=[row.values() for row in rows],
                columns=INSERT_COLUMNS,
                timeout=COPY_TIMEOUT,
            )
            status = await conn.execute(SQL_MOVE_IMPORTED, timeout=COPY_TIMEOUT)
        return rows_affected(status)

    async def speaker_names(self, scope: RecallScope, now: datetime, turns: int) -> list[str]:
        """The distinct sender names on the scope's last ``turns`` turns up to ``now``."""
        async with self._connection() as conn:
            records = await conn.fetch(scope.pick(SQL_SCOPE_SPEAKER_NAMES), scope.key, now, turns)
        return sorted(r["sender_name"] for r in records)

    async def session_size(self, scope: RecallScope) -> int:
        """The rows of the scope's session (or shared group), live or not."""
        async with self._connection() as conn:
            return int(await conn.fetchval(scope.pick(SQL_SCOPE_SIZE), scope.key))

    async def anchor_candidates(
        self,
        *,
        scope: RecallScope,
        model: str,
        query_vector: np.ndarray,
        now: datetime,
        limit: int,
        index_dim: int | None = None,
        filters: AnchorFilters = NO_FILTERS,
    ) -> list[AnchorCandidate]:
        """The ``limit`` nearest live embedded turns of one session (within ``filters``).

        ``index_dim=None`` scans the session (or the shared group) exactly. With a dimension,
        the session's HNSW index is used, with pgvector's iterative scan so that filters cannot
        starve the result.
        """
        if index_dim is not None and scope.shared_group is not None:
            raise ValueError("a shared group has no vector index: search it exactly")
        async with self._connection() as conn:
            if index_dim is None:
                records = await conn.fetch(
                    scope.pick(SQL_SCOPE_ANCHORS_EXACT),
                    scope.key,
                    model,
                    now,
                    query_vector,
                    limit,
                    *filters.args(),
                )
            else:
                async with in_transaction(conn):
                    # The session's partial index matches only a plan made for this key.
                    await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
                    await conn.execute("SET LOCAL hnsw.iterative_scan = strict_order")
                    await conn.execute(f"SET LOCAL hnsw.ef_search = {max(40, 2 * limit)}")
                    # Steer the planner to the HNSW scan: a sort of the whole session is slower.
                    await conn.execute("SET LOCAL enable_sort = off")
                    records = await conn.fetch(
                        SQL_ANCHORS_INDEX.format(dim=int(index_dim)),
                        scope.session_key,
                        model,
                        now,
                        query_vector,
                        limit,
                        *filters.args(),
                    )
        return [
            AnchorCandidate(r["id"], r["created_at"], float(r["similarity"]))
            for r in records
            if usable_turn(r)
        ]

    async def keyword_candidates(
        self,
        *,
        scope: RecallScope,
        model: str,
        terms: Sequence[str],
        now: datetime,
        limit: int,
        session_rows: int,
        query_vector: np.ndarray | None = None,
        filters: AnchorFilters = NO_FILTERS,
        weights: Sequence[float] | None = None,
    ) -> list[KeywordCandidate]:
        """The session's ``limit`` best live turns by keyword score (see the SQL's comment);
        ``weights`` (one per term, default 1 each) scale each term's share of the score."""
        query = tsquery_any(terms)
        if query is None or limit <= 0:
            return []
        if weights is None:
            weights = [1.0] * len(terms)
        if len(weights) != len(terms):
            raise ValueError("one weight a term")
        args = (
            scope.key,
            model,
            now,
            query,
            list(terms),
            *filters.args(),
            float(max(session_rows, 1)),
            query_vector,
            limit,
            [float(w) for w in weights],
        )
        async with self._connection() as conn:
            if session_rows <= CUSTOM_PLAN_MIN_ROWS:
                records = await conn.fetch(scope.pick(SQL_SCOPE_KEYWORD_CANDIDATES), *args)
            else:
                async with in_transaction(conn):
                    # A plan for these very terms and session: a generic plan (after five
                    # calls of a prepared statement) guesses the session small and the terms
                    # common, and reads a large session row by row instead of looking its
                    # terms up (measured: 30 ms instead of 3 in a 25,000-turn session).
                    await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
                    records = await conn.fetch(scope.pick(SQL_SCOPE_KEYWORD_CANDIDATES), *args)
        return [
            KeywordCandidate(
                r["id"],
                r["created_at"],
                float(r["score"]),
                None if r["similarity"] is None else float(r["similarity"]),
                float(r["coverage"]),
                float(r["rarity"]),
            )
            for r in records
        ]

    async def latest_candidates(
        self,
        *,
        scope: RecallScope,
        model: str,
        now: datetime,
        limit: int,
        query_vector: np.ndarray | None = None,
        filters: AnchorFilters = NO_FILTERS,
    ) -> list[AnchorCandidate]:
        """The session's ``limit`` latest live turns, newest first (similarity 0 if unknown)."""
        args = (scope.key, model, now, query_vector, limit, *filters.args())
        return await self._candidates(scope.pick(SQL_SCOPE_LATEST_CANDIDATES), args)

    async def referring_candidates(
        self,
        *,
        scope: RecallScope,
        model: str,
        now: datetime,
        limit: int,
        query_vector: np.ndarray | None = None,
        filters: AnchorFilters = NO_FILTERS,
    ) -> list[AnchorCandidate]:
        """The session's live turns that talk about a time inside ``filters``' range (their
        ``refers_*`` range overlaps it; said at any time), nearest to ``query_vector`` first,
        else newest first (similarity 0 if unknown)."""
        args = (scope.key, model, now, query_vector, limit, *filters.args())
        return await self._candidates(scope.pick(SQL_SCOPE_REFERRING_CANDIDATES), args)

    async def _candidates(self, sql: str, args: tuple[Any, ...]) -> list[AnchorCandidate]:
        async with self._connection() as conn:
            records = await conn.fetch(sql, *args)
        return [
            AnchorCandidate(r["id"], r["created_at"], float(r["similarity"] or 0.0))
            for r in records
            if usable_turn(r)
        ]

    async def windows(
        self,
        *,
        scope: RecallScope,
        anchors: Sequence[AnchorCandidate],
        window_size: int,
        now: datetime,
    ) -> list[tuple[int, MemoryTurn]]:
        """``(anchor_id, turn)`` for each anchor's window (the anchor included), in the anchor's
        own session; anchors outside ``scope`` get none."""
        if not anchors:
            return []
        async with self._connection() as conn:
            records = await conn.fetch(
                scope.pick(SQL_SCOPE_WINDOWS),
                scope.key,
                [a.id for a in anchors],
                [a.created_at for a in anchors],
                now,
                window_size,
            )
        return [(r["anchor_id"], turn_from_record(r)) for r in records if usable_turn(r)]

    async def recent_turns(
        self, session_key: str, *, since: datetime, now: datetime, limit: int
    ) -> list[MemoryTurn]:
        async with self._connection() as conn:
            records = await conn.fetch(SQL_RECENT, session_key, since, now, limit)
        return [turn_from_record(r) for r in records if usable_turn(r)]

    async def last_turn_time(self, session_key: str, now: datetime) -> datetime | None:
        async with self._connection() as conn:
            value: datetime | None = await conn.fetchval(SQL_LAST_TURN_AT, session_key, now)
        return value if usable_time(value) else None

    async def session_tail(
        self,
        session_key: str,
        *,
        since: datetime,
        now: datetime,
        limit: int,
        group_id: int | None = None,
    ) -> SessionTail:
        """``last_turn_time`` and ``recent_turns`` of one moment, in one round trip; with
        ``group_id``, the recent turns are those of every session of that group."""
        async with self._connection() as conn:
            if group_id is None:
                records = await conn.fetch(SQL_SESSION_TAIL, session_key, since, now, limit)
            else:
                records = await conn.fetch(SQL_GROUP_TAIL, session_key, since, now, limit, group_id)
        last_turn_at = records[0]["last_turn_at"]
        return SessionTail(
            last_turn_at=last_turn_at if usable_time(last_turn_at) else None,
            recent=tuple(
                turn_from_record(r) for r in records if r["id"] is not None and usable_turn(r)
            ),
        )
