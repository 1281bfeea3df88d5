"""All SQL of the dialogue table, behind ``PgDialogueStore``. Rows leave as ``MemoryTurn``."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any

import asyncpg
import numpy as np
from asyncpg.pool import PoolConnectionProxy

from ..errors import StorageError
from ..lang.indexed import indexed_text
from ..lang.keywords import tsquery_any
from ..lang.repeats import Repeats
from ..models import ForgetScope, MemoryTurn, RecalledMessage, Role
from .opt_outs import not_opted_out
from .pg import rows_affected
from .row_changes import RowTaker, edit_sql, put_back_sql, take_sql
from .scopes import scope_count, scope_delete

TURN_COLUMNS = (
    "id, message_uuid, session_key, self_id, user_id, group_id, chat_type, role, content, "
    "sender_name, qq_message_id, created_at, score, expires_at, token_count"
)

INSERT_COLUMNS = (
    "message_uuid",
    "self_id",
    "session_key",
    "user_id",
    "group_id",
    "chat_type",
    "role",
    "content",
    "sender_name",
    "qq_message_id",
    "raw_segments",
    "embedding",
    "embedding_model",
    "token_count",
    "created_at",
    "keywords",
    "refers_start",
    "refers_end",
    "text_form",
)

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

SQL_SESSION_SIZE = "SELECT count(*) FROM dialogues WHERE session_key = $1"


def _scoped(sql: str, alias: str = "") -> tuple[str, str]:
    """``sql`` for one session and for a whole shared group (``RecallScope``): its one
    ``{alias}session_key = $1`` becomes ``{alias}group_id = $1::bigint``, read through the group
    index. Every member's session of that group, and nothing of another chat, is then read."""
    marker = f"{alias}session_key = $1"
    if sql.count(marker) != 1:
        raise ValueError(f"a scoped statement names its session exactly once: {sql}")
    return sql, sql.replace(marker, f"{alias}group_id = $1::bigint")


SQL_SCOPE_SIZE = _scoped(SQL_SESSION_SIZE)

# Optional anchor filters shared by the channels: $6 roles, $7 required
# phrases (normalised, each must occur in the content), $8/$9 a time range [start, end).
# The range bounds are plain comparisons so the session index can use them.
_ROLE_AND_PHRASE_FILTERS = """
  AND ($6::text[] IS NULL OR role = ANY($6::text[]))
  AND NOT EXISTS (SELECT 1 FROM unnest($7::text[]) AS k(phrase)
                  WHERE strpos(lower(normalize(content, NFKC)), k.phrase) = 0)
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
# the matched terms' IDF, with the session ($10 rows) as the collection, damped for long
# messages. The filters apply after the document frequencies, which describe the whole
# session. Only the $12 best rows are read again for their cosine to $11 (NULL: none).
SQL_KEYWORD_CANDIDATES = f"""
WITH matches AS MATERIALIZED (
    SELECT id, created_at, role, content, tsvector_to_array(keywords) AS terms
    FROM dialogues
    WHERE session_key = $1 AND keywords @@ $4::tsquery
      AND created_at <= $3 AND (expires_at IS NULL OR expires_at > $3)
),
df AS (
    SELECT term, count(*) AS n FROM matches, unnest(terms) AS term
    WHERE term = ANY($5::text[]) GROUP BY term
),
scored AS (
    SELECT t.id, sum(ln(1 + ($10::float8 - df.n + 0.5) / (df.n + 0.5))) AS idf
    FROM (SELECT id, unnest(terms) AS term FROM matches) t JOIN df USING (term)
    GROUP BY t.id
),
average AS (SELECT greatest(avg(cardinality(terms)), 1)::float8 AS len FROM matches),
-- The IDF mass of the whole query (terms found nowhere weigh the most).
query AS (
    SELECT sum(ln(1 + ($10::float8 - coalesce(df.n, 0) + 0.5) / (coalesce(df.n, 0) + 0.5)))
           AS idf
    FROM unnest($5::text[]) AS q(term) LEFT JOIN df USING (term)
),
-- How rare in this session the query's three rarest found terms are, 0-1 (ln(N/df) / ln N):
-- near 0 when even they are in most turns (chit-chat words), 1 for a term in one turn only.
rarity AS (
    SELECT coalesce(avg(r), 0) AS value FROM (
        SELECT CASE WHEN $10::float8 > 1 THEN ln($10::float8 / n) / ln($10::float8) ELSE 1 END
               AS r
        FROM df ORDER BY r DESC LIMIT 3
    ) rarest
),
best AS (
    SELECT id, created_at, s.idf / greatest(q.idf, 1e-9) AS coverage,
           s.idf * 2.2 / (1 + 1.2 * (0.25 + 0.75 * cardinality(terms) / a.len)) AS score
    FROM scored s JOIN matches USING (id) CROSS JOIN average a CROSS JOIN query q
    WHERE true {_ANCHOR_FILTERS}
    ORDER BY score DESC, created_at DESC, id DESC LIMIT $12
)
SELECT b.id, b.created_at, b.score, b.coverage, r.value AS rarity,
       CASE WHEN d.embedding_model = $2 AND $11::halfvec IS NOT NULL
            THEN 1 - (d.embedding <=> $11::halfvec) END AS similarity
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

# The short-term context: whatever the evaluator made of a turn, the conversation of the last
# minutes stays (expired rows outlive their expiry by that window, see ``purge_expired``).
SQL_RECENT = f"""
SELECT * FROM (
    SELECT {TURN_COLUMNS} FROM dialogues
    WHERE session_key = $1 AND created_at >= $2 AND created_at <= $3
    ORDER BY created_at DESC, id DESC LIMIT $4
) recent ORDER BY created_at, id
"""

# Everything stored of one person, every chat, oldest first (/导出我的记忆).
SQL_USER_TURNS = f"SELECT {TURN_COLUMNS} FROM dialogues WHERE user_id = $1 ORDER BY created_at, id"

# Export (memory_core.transfer): one page of a set of sessions (NULL: all), in id order.
SQL_EXPORT_TURNS = f"""
SELECT {TURN_COLUMNS}, raw_segments::text AS raw_segments FROM dialogues
WHERE ($1::text[] IS NULL OR session_key = ANY($1::text[])) AND id > $2
ORDER BY id LIMIT $3
"""
SQL_IDS_BY_UUID = """
SELECT message_uuid, id FROM dialogues WHERE message_uuid = ANY($1::text[])
"""
SQL_TURNS_BY_ID = f"SELECT {TURN_COLUMNS} FROM dialogues WHERE id = ANY($1::bigint[])"
SQL_UUIDS_BY_ID = "SELECT id, message_uuid FROM dialogues WHERE id = ANY($1::bigint[])"
# An imported turn keeps the retention its source gave it (score and expiry).
SQL_SET_RETENTION = """
UPDATE dialogues SET score = $2, expires_at = CASE WHEN pinned THEN NULL ELSE $3::timestamptz END
WHERE message_uuid = $1
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

# The rows' indexed text is made in Python (lang.indexed) from these columns.
_INDEX_SOURCE = "id, content, sender_name, text_form"

SQL_PENDING_EMBEDDINGS = f"""
SELECT {_INDEX_SOURCE} FROM dialogues WHERE embedding IS NULL ORDER BY id LIMIT $1
"""
SQL_COUNT_PENDING = "SELECT count(*) FROM dialogues WHERE embedding IS NULL"

# Rows to embed again: another model, no embedding yet, or another text form than $2.
_NEEDING_REINDEX = "(embedding_model IS DISTINCT FROM $1 OR embedding IS NULL OR text_form <> $2)"
SQL_NEEDING_REEMBED = f"""
SELECT {_INDEX_SOURCE} FROM dialogues WHERE id > $3 AND {_NEEDING_REINDEX}
ORDER BY id LIMIT $4
"""
SQL_COUNT_NEEDING_REEMBED = f"SELECT count(*) FROM dialogues WHERE {_NEEDING_REINDEX}"

SQL_SET_EMBEDDING = """
UPDATE dialogues SET embedding = $2, embedding_model = $3 WHERE id = $1
"""

# Rows whose embedding and keywords were made from another text form than $1 (a change of
# MEMORY_INDEX_SPEAKER, or rows from before migration 007), walked by id from $2.
SQL_OTHER_TEXT_FORM = f"""
SELECT {_INDEX_SOURCE} FROM dialogues WHERE id > $2 AND text_form <> $1 ORDER BY id LIMIT $3
"""
SQL_COUNT_OTHER_TEXT_FORM = "SELECT count(*) FROM dialogues WHERE text_form <> $1"
# Embedding, keywords and form change together, so a row is never half in one form.
SQL_SET_INDEXED = """
UPDATE dialogues
SET embedding = $2, embedding_model = $3, keywords = array_to_tsvector($4::text[]),
    text_form = $5
WHERE id = $1
"""

# The keyword backfill (rows from before migration 003, or after a change of the analyser).
SQL_PENDING_KEYWORDS = f"""
SELECT {_INDEX_SOURCE} FROM dialogues WHERE keywords IS NULL ORDER BY id LIMIT $1
"""
SQL_SET_KEYWORDS = """
UPDATE dialogues SET keywords = array_to_tsvector($2::text[]) WHERE id = $1
"""
SQL_RESET_KEYWORDS = "UPDATE dialogues SET keywords = NULL WHERE keywords IS NOT NULL"

# The time-reference backfill (rows from before migration 008), in id order from a resume point.
SQL_WITHOUT_TIME_REFERENCE = """
SELECT id, content, created_at FROM dialogues
WHERE id > $1 AND refers_start IS NULL ORDER BY id LIMIT $2
"""
SQL_COUNT_WITHOUT_TIME_REFERENCE = """
SELECT count(*) FROM dialogues WHERE id > $1 AND refers_start IS NULL
"""
SQL_SET_TIME_REFERENCE = "UPDATE dialogues SET refers_start = $2, refers_end = $3 WHERE id = $1"

# A recalled (撤回) QQ message: its turns in the chat the notice names (a group, or a private
# chat with that user — or any private chat of the bot, when the bot recalled its own message).
SQL_RECALLED_TURNS = """
SELECT id, session_key, role, content FROM dialogues
WHERE qq_message_id = $1 AND ($2::bigint IS NULL OR self_id = $2)
  AND CASE WHEN $3::bigint IS NOT NULL THEN group_id = $3
           ELSE group_id IS NULL AND ($4::bigint IS NULL OR $4 IN (user_id, self_id)) END
FOR UPDATE
"""
# Turns a person deletes in one session (/忘记): these ids, and those containing the case-folded
# text $3 (NULL: none).
SQL_CHOSEN_TURNS = """
SELECT id, session_key, role, content FROM dialogues
WHERE session_key = $1
  AND (id = ANY($2::bigint[])
       OR ($3::text IS NOT NULL AND strpos(lower(normalize(content, NFKC)), $3) > 0))
ORDER BY id
"""
# The bot's reply to each of these user turns: the assistant turns of its session after it, up
# to the session's next user turn.
SQL_REPLIES_TO = """
SELECT d.id FROM dialogues u
JOIN dialogues d ON d.session_key = u.session_key AND d.role = 'assistant' AND d.id > u.id
WHERE u.id = ANY($1::bigint[]) AND u.role = 'user'
  AND d.id < coalesce(
      (SELECT min(n.id) FROM dialogues n
       WHERE n.session_key = u.session_key AND n.role = 'user' AND n.id > u.id),
      9223372036854775807)
"""
# The bot's later words in a session, read to find those repeating a deleted turn
# (``lang.repeats``); the nearest first, at most $3.
SQL_LATER_REPLIES = """
SELECT id, content FROM dialogues
WHERE session_key = $1 AND role = 'assistant' AND id > $2
ORDER BY id LIMIT $3
"""
LATER_REPLIES_READ = 2000
SQL_DELETE_TURNS = """
DELETE FROM dialogues WHERE id = ANY($1::bigint[]) RETURNING id, user_id, role, created_at
"""

SQL_ANY_EMBEDDED = "SELECT EXISTS (SELECT 1 FROM dialogues WHERE embedding IS NOT NULL)"
SQL_META_GET = "SELECT key, value FROM memory_meta"
SQL_META_SET = """
INSERT INTO memory_meta (key, value) VALUES ($1, $2)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value
"""
# The HNSW indexes on the dialogues and whether each is usable (an interrupted CREATE INDEX
# CONCURRENTLY leaves an invalid one). Matches this version's per-session indexes and the
# table-wide index of earlier versions (dialogues_embedding_hnsw_<dim>), which is dropped.
# Indexes another connection is building right now (invalid until done) are left out.
SQL_VECTOR_INDEXES = """
SELECT c.relname AS name, i.indisvalid AS valid
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = 'dialogues'::regclass AND c.relname ~ '^dialogues_(embedding_)?hnsw_'
  AND NOT EXISTS (SELECT 1 FROM pg_stat_progress_create_index p
                  WHERE p.index_relid = i.indexrelid)
"""
SQL_INDEX_BUILD_RUNNING = """
SELECT EXISTS (SELECT 1 FROM pg_stat_progress_create_index WHERE relid = 'dialogues'::regclass)
"""
SQL_INDEX_VALID = """
SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = $1
"""
# One partial HNSW index per large session: only that session's inserts pay for the graph,
# and a search in it needs no filtering. The session key is checked (digits and a colon)
# before it is written into the statement. ef_construction 32 (default 64) builds twice as
# fast and inserts ~1.5x faster; searches use a generous ef_search.
SQL_CREATE_SESSION_VECTOR_INDEX = """
CREATE INDEX {concurrently} IF NOT EXISTS {name} ON dialogues
USING hnsw ((embedding::halfvec({dim})) halfvec_cosine_ops) WITH (m = 16, ef_construction = 32)
WHERE session_key = '{session_key}'
"""
SQL_LARGE_SESSIONS = """
SELECT session_key, count(*) AS n FROM dialogues GROUP BY session_key HAVING count(*) > $1
"""

# Sessions above this size get a plan made for their own key and terms (planning costs ~1 ms).
CUSTOM_PLAN_MIN_ROWS = 2_000
INDEX_BUILD_MEMORY_MIN_MB = 64
INDEX_BUILD_MEMORY_MAX_MB = 4096
INDEX_BYTES_PER_ROW_OVERHEAD = 200  # HNSW neighbour lists and tuple headers, roughly
INDEX_BUILD_TIMEOUT = 6 * 3600.0
COPY_TIMEOUT = 600.0

SQL_STATS = """
SELECT chat_type, role, count(*) AS n FROM dialogues GROUP BY chat_type, role
"""
SQL_STATS_SUMMARY = """
SELECT count(DISTINCT session_key) AS sessions, min(created_at) AS oldest,
       max(created_at) AS newest, count(*) FILTER (WHERE embedding IS NULL) AS pending,
       count(*) FILTER (WHERE expires_at IS NOT NULL AND expires_at <= now()) AS expired,
       pg_total_relation_size('dialogues') AS bytes
FROM dialogues
"""

# ----------------------------------------------------------------------------- the console
# The operator console's views of the turns. Every query about a session names it,
# so no view of one session can show another's rows.

# Who and where, read back from a session key ("{user}" or "{group}:{user}").
_SESSION_WHO = """
       substr(session_key, strpos(session_key, ':') + 1)::bigint AS user_id,
       CASE WHEN strpos(session_key, ':') > 0
            THEN split_part(session_key, ':', 1)::bigint END AS group_id,
       CASE WHEN strpos(session_key, ':') > 0 THEN 'group' ELSE 'private' END AS chat_type"""

# The sessions with turns (their summary rows, kept by triggers: migration 011) and the sessions
# $6 last active at $7 that hold none, most recently active first; $1 chat type, $2 group,
# $3 user, $8 session key (NULL: any). A few thousand short rows are read, never the turns.
SQL_SESSION_LIST = f"""
WITH listed AS (
    SELECT session_key, turns, last_at FROM dialogue_sessions
    UNION ALL
    SELECT e.session_key, 0, e.last_at
    FROM unnest($6::text[], $7::timestamptz[]) AS e(session_key, last_at)
    WHERE NOT EXISTS (SELECT 1 FROM dialogue_sessions s WHERE s.session_key = e.session_key)
),
who AS (SELECT listed.*, {_SESSION_WHO} FROM listed)
SELECT * FROM who
WHERE ($1::text IS NULL OR chat_type = $1) AND ($2::bigint IS NULL OR group_id = $2)
  AND ($3::bigint IS NULL OR user_id = $3) AND ($8::text IS NULL OR session_key = $8)
ORDER BY last_at DESC, session_key LIMIT $4 OFFSET $5
"""
# How many sessions the list above holds: those with turns and those of $1 without any.
SQL_SESSION_COUNT = """
SELECT (SELECT count(*) FROM dialogue_sessions)
     + (SELECT count(*) FROM unnest($1::text[]) AS e(session_key)
        WHERE NOT EXISTS (SELECT 1 FROM dialogue_sessions s WHERE s.session_key = e.session_key))
"""
SQL_SESSION_ACTIVITY = f"""
SELECT session_key, turns, last_at, {_SESSION_WHO} FROM dialogue_sessions WHERE session_key = $1
"""
# Each session's name: the sender name of its latest named user turn (the session index,
# backwards, one probe a session).
SQL_SESSION_NAMES = """
SELECT k.session_key, n.sender_name
FROM unnest($1::text[]) AS k(session_key)
CROSS JOIN LATERAL (
    SELECT d.sender_name FROM dialogues d
    WHERE d.session_key = k.session_key AND d.role = 'user' AND d.sender_name IS NOT NULL
    ORDER BY d.created_at DESC, d.id DESC LIMIT 1
) n
"""

# The groups with turns (from the session rows: one a group member).
SQL_GROUPS_WITH_TURNS = """
SELECT DISTINCT split_part(session_key, ':', 1)::bigint AS group_id FROM dialogue_sessions
WHERE strpos(session_key, ':') > 0 ORDER BY 1 LIMIT $1
"""
# Turns stored per local day since $1 ($2: the timezone), split by who spoke.
SQL_TURNS_PER_DAY = """
SELECT (created_at AT TIME ZONE $2)::date AS day,
       count(*) FILTER (WHERE role = 'user') AS user_turns,
       count(*) FILTER (WHERE role = 'assistant') AS bot_turns
FROM dialogues WHERE created_at >= $1
GROUP BY 1 ORDER BY 1
"""

_SESSION_TURNS_IN = """
SELECT {columns}, pinned FROM dialogues
WHERE session_key = $1
  AND created_at >= coalesce($2::timestamptz, '-infinity')
  AND created_at < coalesce($3::timestamptz, 'infinity') {matching}
ORDER BY created_at DESC, id DESC LIMIT $4 OFFSET $5
"""
# A page of a session's turns, newest first, in a time range [$2, $3) (NULL: open).
SQL_SESSION_TURNS = _SESSION_TURNS_IN.format(columns=TURN_COLUMNS, matching="")
# Those containing the case-folded text $6: found through the keyword index by terms $7
# (a tsquery every such turn's terms match; a turn not analysed yet is read too), then checked.
SQL_SESSION_TURNS_CONTAINING = _SESSION_TURNS_IN.format(
    columns=TURN_COLUMNS,
    matching="""
  AND (keywords @@ $7::tsquery OR keywords IS NULL)
  AND strpos(lower(normalize(content, NFKC)), $6) > 0""",
)
# Without such terms (one character, letters or digits that may sit inside a longer word)
# every turn of the session in the range is checked.
SQL_SESSION_TURNS_SCANNED = _SESSION_TURNS_IN.format(
    columns=TURN_COLUMNS, matching="\n  AND strpos(lower(normalize(content, NFKC)), $6) > 0"
)
SQL_SESSION_TURNS_BY_ID = f"""
SELECT {TURN_COLUMNS}, pinned FROM dialogues WHERE session_key = $1 AND id = ANY($2::bigint[])
ORDER BY created_at, id
"""
# Pinning keeps a turn: no expiry (the evaluator gives it none either); unpinning gives it $4.
SQL_PIN_TURN = """
UPDATE dialogues SET pinned = $3, expires_at = CASE WHEN $3 THEN NULL ELSE $4::timestamptz END
WHERE id = $1 AND session_key = $2
RETURNING content
"""
# The console's edit (its text before goes to the audit log).
SQL_EDIT_TURN = edit_sql(
    "dialogues",
    "content = $3, token_count = $4, embedding = $5::halfvec, embedding_model = $6, "
    "keywords = array_to_tsvector($7::text[]), text_form = $8",
    TURN_COLUMNS,
)
# Distillation reads a session after its watermark by id, not time: the watermark is an id, and
# a turn spooled during an outage (stored later, with its original time) must still be read
# once. Turns already expired are skipped.
SQL_UNDISTILLED_TURNS = """
SELECT id, role, content, sender_name, created_at FROM dialogues
WHERE session_key = $1 AND id > $2 AND (expires_at IS NULL OR expires_at > $3)
ORDER BY id LIMIT $4
"""

# A turn the operator pinned keeps no expiry, whatever its score (migration 011).
SQL_SET_SCORE = """
UPDATE dialogues SET score = $3, expires_at = CASE WHEN pinned THEN NULL ELSE $4::timestamptz END
WHERE id = $1 OR id = $2
"""

SQL_PURGE_BATCH = """
DELETE FROM dialogues WHERE id IN (
    SELECT id FROM dialogues WHERE expires_at IS NOT NULL AND expires_at <= $1 AND NOT pinned
    ORDER BY expires_at LIMIT $2
)
"""


# The turns a batch was distilled from, locked against deletion until the saving transaction
# ends (KEY SHARE: other updates of the turns, such as their embedding, are not held up).
SQL_LOCK_SOURCE_TURNS = """
SELECT count(*) FROM (
    SELECT 1 FROM dialogues WHERE id = ANY($1::bigint[]) FOR KEY SHARE
) AS kept
"""
SQL_TAKE_TURN = take_sql("dialogues")
SQL_PUT_BACK_TURN = put_back_sql("dialogues")


@dataclass(frozen=True)
class NewTurnRow:
    """A row ready to insert: cleaned content, derived keys, embedding or None."""

    message_uuid: str
    self_id: int | None
    session_key: str
    user_id: int
    group_id: int | None
    chat_type: str
    role: str
    content: str
    sender_name: str | None
    qq_message_id: int | None
    raw_segments: str | None  # JSON text
    embedding: np.ndarray | None
    embedding_model: str | None
    token_count: int
    created_at: datetime
    keywords: list[str]  # search terms (memory_core.lang.keywords), stored as a tsvector
    text_form: int  # which text the embedding and keywords are made of (lang.indexed)
    indexed: str  # that text (not a column: what the caller embeds)
    refers_start: datetime | None = None  # the time the turn talks about (migration 008)
    refers_end: datetime | None = None

    def values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, column) for column in INSERT_COLUMNS)


@dataclass(frozen=True)
class SourceTurn:
    """A turn as the extraction reads it."""

    id: int
    role: str
    content: str
    sender_name: str | None
    created_at: datetime


@dataclass(frozen=True)
class TurnEdit:
    """A turn's new text with everything derived from it."""

    content: str
    token_count: int
    embedding: np.ndarray | None
    embedding_model: str | None
    keywords: Sequence[str]
    text_form: int  # the form ``keywords`` and ``embedding`` were made in (lang.indexed)

    def values(self) -> tuple[Any, ...]:
        return (self.content, self.token_count, self.embedding, self.embedding_model,
                list(self.keywords), self.text_form)  # fmt: skip


@dataclass(frozen=True)
class ExportedTurn:
    """A stored turn with its raw OneBot segments, as an export carries it."""

    turn: MemoryTurn
    raw_segments: list[dict[str, Any]] | None


@dataclass(frozen=True)
class DeletedTurn:
    """A turn deleted by a 撤回 or a person's delete (what depended on it goes next)."""

    id: int
    user_id: int
    created_at: datetime
    role: Role = "user"


@dataclass(frozen=True)
class RecallScope:
    """Whose turns a search reads: one session (``"{group_id}:{user_id}"`` or
    ``"{user_id}"``), or every session of ``shared_group`` (``memory_core.recall.sharing``).
    A shared scope is never served by a per-session vector index: it is searched exactly."""

    session_key: str
    shared_group: int | None = None

    @property
    def key(self) -> str | int:
        """``$1`` of the scoped statements."""
        return self.session_key if self.shared_group is None else self.shared_group

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
    (see ``keywords.required_phrases``); ``start``/``end``: a time range ``[start, end)``.
    """

    roles: tuple[str, ...] | None = None
    phrases: tuple[str, ...] | None = None
    start: datetime | None = None
    end: datetime | None = None

    def args(self) -> tuple[Any, ...]:
        return (
            list(self.roles) if self.roles else None,
            list(self.phrases) if self.phrases else None,
            self.start,
            self.end,
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
class SessionActivity:
    """A session as the console lists it: who, where, how many turns, when last active."""

    session_key: str
    user_id: int
    group_id: int | None
    chat_type: str
    turns: int
    last_at: datetime


@dataclass(frozen=True)
class SessionTail:
    """What a new message of a session reads first: the time of the session's last turn and
    its short-term turns, oldest first (see ``session_tail``)."""

    last_turn_at: datetime | None
    recent: tuple[MemoryTurn, ...]


@dataclass(frozen=True)
class ShownTurn:
    """A turn as the console shows it: the turn, and whether the operator pinned it."""

    turn: MemoryTurn
    pinned: bool


@dataclass(frozen=True)
class TurnsShown:
    """Which of a session's turns the console lists (see ``session_turns``)."""

    start: datetime | None = None
    end: datetime | None = None
    containing: str | None = None  # case-folded text
    terms_query: str | None = None  # a tsquery every turn containing it matches
    limit: int = 50
    offset: int = 0


@dataclass(frozen=True)
class StoreStats:
    by_type_role: dict[tuple[str, str], int]
    sessions: int
    oldest: datetime | None
    newest: datetime | None
    pending_embeddings: int
    expired_not_purged: int
    total_bytes: int


_SESSION_KEY = re.compile(r"^(\d+)(?::(\d+))?$")
_SESSION_INDEX_NAME = re.compile(r"^dialogues_hnsw_(\d+)_s(\d+)(?:_(\d+))?$")


async def _with_replies(
    conn: PoolConnectionProxy[asyncpg.Record], said: Sequence[asyncpg.Record]
) -> set[int]:
    """The ids of turns ``said`` (id, session_key, role, content), the bot's replies to the
    user turns among them, and the bot's later replies in their sessions that repeat them
    (``lang.repeats``: the same text found again, as the first reply is found by place)."""
    chosen = {r["id"] for r in said}
    users = [r for r in said if r["role"] == "user"]
    if not users:
        return chosen
    chosen.update(r["id"] for r in await conn.fetch(SQL_REPLIES_TO, [r["id"] for r in users]))
    for session_key in {r["session_key"] for r in users}:
        own = [r for r in users if r["session_key"] == session_key]
        repeated = Repeats([r["content"] for r in own])
        if not repeated:
            continue
        first = min(r["id"] for r in own)
        later = await conn.fetch(SQL_LATER_REPLIES, session_key, first, LATER_REPLIES_READ)
        chosen.update(r["id"] for r in later if repeated.found_in(r["content"]))
    return chosen


async def _delete(conn: PoolConnectionProxy[asyncpg.Record], ids: set[int]) -> list[DeletedTurn]:
    if not ids:
        return []
    records = await conn.fetch(SQL_DELETE_TURNS, sorted(ids))
    return [DeletedTurn(r["id"], r["user_id"], r["created_at"], r["role"]) for r in records]


def session_index_name(dim: int, session_key: str) -> str | None:
    """The name of the session's HNSW index, or ``None`` for a key that cannot have one."""
    match = _SESSION_KEY.match(session_key)
    if match is None:
        return None
    return f"dialogues_hnsw_{int(dim)}_s" + "_".join(g for g in match.groups() if g is not None)


def parse_session_index_name(name: str) -> tuple[int, str] | None:
    """(dimension, session key) of a per-session index name; ``None`` for any other index."""
    match = _SESSION_INDEX_NAME.match(name)
    if match is None:
        return None
    dim, first, second = match.groups()
    return int(dim), first if second is None else f"{first}:{second}"


async def _vector_indexes(conn: PoolConnectionProxy[asyncpg.Record]) -> dict[str, bool]:
    return {r["name"]: r["valid"] for r in await conn.fetch(SQL_VECTOR_INDEXES)}


def _indexed(record: asyncpg.Record, text_form: int | None = None) -> str:
    """The row's indexed text in ``text_form`` (default: the form it is stored in)."""
    form = record["text_form"] if text_form is None else text_form
    return indexed_text(record["content"], record["sender_name"], form)


def _turn(record: asyncpg.Record) -> MemoryTurn:
    return MemoryTurn(
        id=record["id"],
        message_uuid=record["message_uuid"],
        session_key=record["session_key"],
        self_id=record["self_id"],
        user_id=record["user_id"],
        group_id=record["group_id"],
        chat_type=record["chat_type"],
        role=record["role"],
        content=record["content"],
        sender_name=record["sender_name"],
        message_id=record["qq_message_id"],
        created_at=record["created_at"],
        score=record["score"],
        expires_at=record["expires_at"],
        token_count=record["token_count"],
    )


def _activity(record: asyncpg.Record) -> SessionActivity:
    return SessionActivity(
        session_key=record["session_key"],
        user_id=record["user_id"],
        group_id=record["group_id"],
        chat_type=record["chat_type"],
        turns=record["turns"],
        last_at=record["last_at"],
    )


def raw_segments_json(segments: Sequence[dict[str, Any]] | None) -> str | None:
    if segments is None:
        return None
    # Segments arrive scrubbed (turn_rows.scrubbed): no NUL, which jsonb refuses, is left.
    return json.dumps(list(segments), ensure_ascii=False, default=str)


class PgDialogueStore(RowTaker):
    """The dialogue table: inserting, searching, windows, deleting, embeddings, metadata."""

    SQL_TAKE = SQL_TAKE_TURN
    SQL_PUT_BACK = SQL_PUT_BACK_TURN

    async def insert_turn(self, row: NewTurnRow) -> MemoryTurn | None:
        """Insert one turn; ``None`` when a turn with the same message_uuid exists."""
        async with self._connection() as conn:
            record = await conn.fetchrow(SQL_INSERT_TURN, *row.values())
        return _turn(record) if record is not None else None

    async def turn_by_uuid(self, message_uuid: str) -> MemoryTurn | None:
        async with self._connection() as conn:
            record = await conn.fetchrow(SQL_TURN_BY_UUID, message_uuid)
        return _turn(record) if record is not None else None

    async def insert_many(self, rows: Sequence[NewTurnRow]) -> int:
        """Bulk insert with COPY through a temporary table; duplicates are skipped."""
        if not rows:
            return 0
        async with self._connection() as conn, conn.transaction():
            await conn.execute(SQL_CREATE_IMPORT_TABLE)
            await conn.copy_records_to_table(
                "dialogue_import",
                records=[row.values() for row in rows],
                columns=INSERT_COLUMNS,
                timeout=COPY_TIMEOUT,
            )
            status = await conn.execute(SQL_MOVE_IMPORTED, timeout=COPY_TIMEOUT)
        return rows_affected(status)

    async def export_turns(
        self, session_keys: Sequence[str] | None, after_id: int, limit: int
    ) -> list[ExportedTurn]:
        """A page of the turns of these sessions (all when ``None``) after ``after_id``."""
        records = await self._sessions_page(SQL_EXPORT_TURNS, session_keys, after_id, limit)
        return [
            ExportedTurn(_turn(r), json.loads(r["raw_segments"]) if r["raw_segments"] else None)
            for r in records
        ]

    async def ids_by_uuid(self, message_uuids: Sequence[str]) -> dict[str, int]:
        """The row ids of those of ``message_uuids`` that are stored."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_IDS_BY_UUID, list(message_uuids))
        return {r["message_uuid"]: r["id"] for r in records}

    async def turns_by_id(self, ids: Collection[int]) -> dict[int, MemoryTurn]:
        """Those of ``ids`` that are stored, by id."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_TURNS_BY_ID, list(ids))
        return {r["id"]: _turn(r) for r in records}

    async def uuids_by_id(self, ids: Collection[int]) -> dict[int, str]:
        """The message_uuid of those of ``ids`` that are stored (an export names turns so)."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_UUIDS_BY_ID, list(ids))
        return {r["id"]: r["message_uuid"] for r in records}

    async def set_retention(self, rows: Sequence[tuple[str, int | None, datetime | None]]) -> None:
        """Give turns (by message_uuid) their score and expiry."""
        if rows:
            async with self._connection() as conn, conn.transaction():
                await conn.executemany(SQL_SET_RETENTION, rows)

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
                async with conn.transaction():
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
        return [AnchorCandidate(r["id"], r["created_at"], float(r["similarity"])) for r in records]

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
    ) -> list[KeywordCandidate]:
        """The session's ``limit`` best live turns by keyword score (see the SQL's comment)."""
        query = tsquery_any(terms)
        if query is None or limit <= 0:
            return []
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
        )
        async with self._connection() as conn:
            if session_rows <= CUSTOM_PLAN_MIN_ROWS:
                records = await conn.fetch(scope.pick(SQL_SCOPE_KEYWORD_CANDIDATES), *args)
            else:
                async with conn.transaction():
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
        return [(r["anchor_id"], _turn(r)) for r in records]

    async def recent_turns(
        self, session_key: str, *, since: datetime, now: datetime, limit: int
    ) -> list[MemoryTurn]:
        async with self._connection() as conn:
            records = await conn.fetch(SQL_RECENT, session_key, since, now, limit)
        return [_turn(r) for r in records]

    async def user_turns(self, user_id: int) -> list[MemoryTurn]:
        """Every stored turn of ``user_id``'s sessions (theirs and the bot's replies)."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_USER_TURNS, user_id)
        return [_turn(r) for r in records]

    async def last_turn_time(self, session_key: str, now: datetime) -> datetime | None:
        async with self._connection() as conn:
            value: datetime | None = await conn.fetchval(SQL_LAST_TURN_AT, session_key, now)
        return value

    async def session_tail(
        self, session_key: str, *, since: datetime, now: datetime, limit: int
    ) -> SessionTail:
        """``last_turn_time`` and ``recent_turns`` of one moment, in one round trip."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_SESSION_TAIL, session_key, since, now, limit)
        return SessionTail(
            last_turn_at=records[0]["last_turn_at"],
            recent=tuple(_turn(r) for r in records if r["id"] is not None),
        )

    async def pending_embeddings(self, limit: int) -> list[tuple[int, str]]:
        """Rows stored without an embedding: (id, indexed text in the row's own form)."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_PENDING_EMBEDDINGS, limit)
        return [(r["id"], _indexed(r)) for r in records]

    async def count_pending_embeddings(self) -> int:
        async with self._connection() as conn:
            return int(await conn.fetchval(SQL_COUNT_PENDING))

    async def rows_needing_reembed(
        self, model: str, text_form: int, after_id: int, limit: int
    ) -> list[tuple[int, str]]:
        """Rows after ``after_id`` not embedded by ``model`` or not in ``text_form``:
        (id, indexed text in ``text_form``)."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_NEEDING_REEMBED, model, text_form, after_id, limit)
        return [(r["id"], _indexed(r, text_form)) for r in records]

    async def count_needing_reembed(self, model: str, text_form: int) -> int:
        async with self._connection() as conn:
            return int(await conn.fetchval(SQL_COUNT_NEEDING_REEMBED, model, text_form))

    async def rows_in_other_form(
        self, text_form: int, after_id: int, limit: int
    ) -> list[tuple[int, str]]:
        """Rows after ``after_id`` indexed in another form: (id, indexed text in
        ``text_form``)."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_OTHER_TEXT_FORM, text_form, after_id, limit)
        return [(r["id"], _indexed(r, text_form)) for r in records]

    async def count_in_other_form(self, text_form: int) -> int:
        async with self._connection() as conn:
            return int(await conn.fetchval(SQL_COUNT_OTHER_TEXT_FORM, text_form))

    async def set_indexed(
        self,
        rows: Sequence[tuple[int, Sequence[str]]],
        vectors: np.ndarray,
        model: str,
        text_form: int,
    ) -> None:
        """Store each row's new embedding and keywords (``(id, terms)``), made in
        ``text_form``."""
        async with self._connection() as conn, conn.transaction():
            await conn.executemany(
                SQL_SET_INDEXED,
                [
                    (row_id, vectors[i], model, list(terms), text_form)
                    for i, (row_id, terms) in enumerate(rows)
                ],
            )

    async def set_embeddings(self, ids: Sequence[int], vectors: np.ndarray, model: str) -> None:
        await self._write_embeddings(SQL_SET_EMBEDDING, ids, vectors, model)

    async def pending_keywords(self, limit: int) -> list[tuple[int, str]]:
        """Rows whose keywords are still to be made, oldest first: (id, indexed text in the
        row's own form)."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_PENDING_KEYWORDS, limit)
        return [(r["id"], _indexed(r)) for r in records]

    async def set_keywords(self, rows: Sequence[tuple[int, Sequence[str]]]) -> None:
        async with self._connection() as conn, conn.transaction():
            await conn.executemany(SQL_SET_KEYWORDS, [(i, list(t)) for i, t in rows])

    async def rows_without_time_reference(
        self, after_id: int, limit: int
    ) -> list[tuple[int, str, datetime]]:
        """Rows after ``after_id`` with no time reference: (id, content, created_at)."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_WITHOUT_TIME_REFERENCE, after_id, limit)
        return [(r["id"], r["content"], r["created_at"]) for r in records]

    async def count_without_time_reference(self, after_id: int) -> int:
        async with self._connection() as conn:
            return int(await conn.fetchval(SQL_COUNT_WITHOUT_TIME_REFERENCE, after_id))

    async def set_time_references(self, rows: Sequence[tuple[int, datetime, datetime]]) -> None:
        """Store each ``(id, refers_start, refers_end)``."""
        if rows:
            async with self._connection() as conn, conn.transaction():
                await conn.executemany(SQL_SET_TIME_REFERENCE, list(rows))

    async def reset_keywords(self) -> int:
        """Mark every row's keywords as stale (the analyser changed); the backfill redoes them."""
        async with self._connection() as conn:
            status = await conn.execute(SQL_RESET_KEYWORDS, timeout=INDEX_BUILD_TIMEOUT)
        return rows_affected(status)

    async def delete_recalled(self, message: RecalledMessage) -> list[DeletedTurn]:
        """Delete a recalled message's turns with the bot's replies to it and its later replies
        that repeat it (``with_replies``)."""
        async with self._connection() as conn, conn.transaction():
            said = await conn.fetch(
                SQL_RECALLED_TURNS,
                message.message_id,
                message.self_id,
                message.group_id,
                message.user_id,
            )
            return await _delete(conn, await _with_replies(conn, said))

    async def turns_to_forget(
        self, session_key: str, ids: Sequence[int], containing: str | None
    ) -> list[MemoryTurn]:
        """What ``forget_turns`` would delete now, in time order (the question before it)."""
        async with self._connection() as conn:
            said = await conn.fetch(SQL_CHOSEN_TURNS, session_key, list(ids), containing)
            chosen = await _with_replies(conn, said)
            records = await conn.fetch(SQL_TURNS_BY_ID, sorted(chosen))
        return sorted((_turn(r) for r in records), key=lambda t: (t.created_at, t.id))

    async def forget_turns(
        self, session_key: str, ids: Sequence[int], containing: str | None
    ) -> list[DeletedTurn]:
        """Delete turns of one session: ``ids``, every turn holding the case-folded text
        ``containing``, and the bot's replies to them and later replies repeating them."""
        async with self._connection() as conn, conn.transaction():
            said = await conn.fetch(SQL_CHOSEN_TURNS, session_key, list(ids), containing)
            return await _delete(conn, await _with_replies(conn, said))

    async def delete_scope(self, scope: ForgetScope) -> int:
        """Delete a user's, a group's, a session's or all rows (see ``TemporalMemory.forget``)."""
        sql, args = scope_delete("dialogues", scope)
        async with self._connection() as conn:
            status = await conn.execute(sql, *args)
        return rows_affected(status)

    async def count_scope(self, scope: ForgetScope) -> int:
        """How many rows ``delete_scope`` would delete now."""
        sql, args = scope_count("dialogues", scope)
        async with self._connection() as conn:
            return int(await conn.fetchval(sql, *args))

    async def any_embedded(self) -> bool:
        async with self._connection() as conn:
            return bool(await conn.fetchval(SQL_ANY_EMBEDDED))

    async def read_meta(self) -> dict[str, str]:
        async with self._connection() as conn:
            return {r["key"]: r["value"] for r in await conn.fetch(SQL_META_GET)}

    async def write_meta(self, values: dict[str, str]) -> None:
        async with self._connection() as conn, conn.transaction():
            await conn.executemany(SQL_META_SET, list(values.items()))

    async def vector_indexes(self) -> dict[str, bool]:
        """The HNSW indexes of the dialogue table, by name: valid (usable) or not."""
        async with self._connection() as conn:
            return await _vector_indexes(conn)

    async def index_build_running(self) -> bool:
        """Whether some connection is building an index on the dialogue table right now."""
        async with self._connection() as conn:
            return bool(await conn.fetchval(SQL_INDEX_BUILD_RUNNING))

    async def large_sessions(self, more_than: int) -> dict[str, int]:
        """Sessions holding more than ``more_than`` rows, with their sizes (a full scan)."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_LARGE_SESSIONS, more_than, timeout=COPY_TIMEOUT)
        return {r["session_key"]: r["n"] for r in records}

    async def create_session_vector_index(
        self, dim: int, session_key: str, *, concurrently: bool = False
    ) -> None:
        """Build the HNSW index of one session (replacing a broken one of the same name).

        ``concurrently`` builds without blocking writes (slower; for a running bot).
        """
        name = session_index_name(dim, session_key)
        if name is None:
            raise StorageError(f"no vector index for the session key {session_key!r}")
        async with self._connection() as conn:
            if (await _vector_indexes(conn)).get(name) is False:
                await conn.execute(f'DROP INDEX IF EXISTS "{name}"')
            # An HNSW build is fast only while its graph fits in maintenance_work_mem; beyond
            # that it crawls (measured: 1M rows at 384-d). Size it to the session, within bounds.
            rows = int(await conn.fetchval(SQL_SESSION_SIZE, session_key))
            megabytes = int(rows * (2 * dim + INDEX_BYTES_PER_ROW_OVERHEAD) * 1.3 / 2**20)
            megabytes = min(INDEX_BUILD_MEMORY_MAX_MB, max(INDEX_BUILD_MEMORY_MIN_MB, megabytes))
            # A session setting (CONCURRENTLY cannot run in a transaction, so no SET LOCAL):
            # undone here, also when the build fails, as the pool's release resets nothing.
            await conn.execute(f"SET maintenance_work_mem = '{megabytes}MB'")
            try:
                await conn.execute(
                    SQL_CREATE_SESSION_VECTOR_INDEX.format(
                        name=name,
                        dim=int(dim),
                        session_key=session_key,  # checked by session_index_name
                        concurrently="CONCURRENTLY" if concurrently else "",
                    ),
                    timeout=INDEX_BUILD_TIMEOUT,
                )
            finally:
                await conn.execute("RESET maintenance_work_mem")
            # IF NOT EXISTS also returns at once while another connection is building it.
            if not await conn.fetchval(SQL_INDEX_VALID, name):
                raise StorageError(f"the vector index {name} is being built elsewhere")

    async def drop_vector_indexes(self, names: Sequence[str] | None = None) -> None:
        """Drop these HNSW indexes (default: all of them)."""
        async with self._connection() as conn:
            if names is None:
                names = list(await _vector_indexes(conn))
            for name in names:
                await conn.execute(f'DROP INDEX IF EXISTS "{name}"')

    async def stats(self) -> StoreStats:
        async with self._connection() as conn:
            by = {(r["chat_type"], r["role"]): r["n"] for r in await conn.fetch(SQL_STATS)}
            s = await conn.fetchrow(SQL_STATS_SUMMARY)
        assert s is not None  # an aggregate always returns a row
        return StoreStats(
            by_type_role=by,
            sessions=s["sessions"],
            oldest=s["oldest"],
            newest=s["newest"],
            pending_embeddings=s["pending"],
            expired_not_purged=s["expired"],
            total_bytes=s["bytes"],
        )

    # ---------------------------------------------------------------- the console

    async def session_list(
        self,
        *,
        chat_type: str | None,
        group_id: int | None,
        user_id: int | None,
        limit: int,
        offset: int,
        without_turns: dict[str, datetime],
        session_key: str | None = None,
    ) -> list[SessionActivity]:
        """Sessions most recently active first (``session_key``: that one only);
        ``without_turns``: sessions (key -> last activity) listed too when they hold no turn
        (only distilled memories)."""
        keys = list(without_turns)
        async with self._connection() as conn:
            rows = await conn.fetch(
                SQL_SESSION_LIST, chat_type, group_id, user_id, limit, offset,
                keys, [without_turns[k] for k in keys], session_key,
            )  # fmt: skip
        return [_activity(r) for r in rows]

    async def session_count(self, without_turns: Sequence[str]) -> int:
        """How many sessions ``session_list`` would list in all (``without_turns`` as there)."""
        async with self._connection() as conn:
            return int(await conn.fetchval(SQL_SESSION_COUNT, list(without_turns)))

    async def session_activity(self, session_key: str) -> SessionActivity | None:
        async with self._connection() as conn:
            row = await conn.fetchrow(SQL_SESSION_ACTIVITY, session_key)
        return None if row is None else _activity(row)

    async def session_names(self, session_keys: Sequence[str]) -> dict[str, str]:
        """The latest sender name of each session that has one."""
        async with self._connection() as conn:
            rows = await conn.fetch(SQL_SESSION_NAMES, list(session_keys))
        return {r["session_key"]: r["sender_name"] for r in rows}

    async def session_turns(self, session_key: str, shown: TurnsShown) -> list[ShownTurn]:
        """A page of the session's turns, newest first."""
        args: list[Any] = [session_key, shown.start, shown.end, shown.limit, shown.offset]
        if shown.containing is None:
            sql = SQL_SESSION_TURNS
        elif shown.terms_query is None:
            sql, args = SQL_SESSION_TURNS_SCANNED, [*args, shown.containing]
        else:
            sql = SQL_SESSION_TURNS_CONTAINING
            args = [*args, shown.containing, shown.terms_query]
        async with self._connection() as conn:
            rows = await conn.fetch(sql, *args)
        return [ShownTurn(_turn(r), r["pinned"]) for r in rows]

    async def session_turns_by_ids(self, session_key: str, ids: Sequence[int]) -> list[ShownTurn]:
        """These turns, if they are the session's, oldest first."""
        async with self._connection() as conn:
            rows = await conn.fetch(SQL_SESSION_TURNS_BY_ID, session_key, list(ids))
        return [ShownTurn(_turn(r), r["pinned"]) for r in rows]

    async def pin_turn(
        self, session_key: str, turn_id: int, *, pinned: bool, expires_at: datetime | None
    ) -> str | None:
        """Pin a turn of this session (no expiry) or unpin it (``expires_at``); its text, or
        ``None`` if the session has no such turn."""
        async with self._connection() as conn:
            text = await conn.fetchval(SQL_PIN_TURN, turn_id, session_key, pinned, expires_at)
        return None if text is None else str(text)

    async def edit_turn(
        self, session_key: str, turn_id: int, edit: TurnEdit
    ) -> tuple[str, MemoryTurn] | None:
        """Replace a turn's text and what is derived from it; (text before, turn after), or
        ``None`` if the session has no such turn."""
        async with self._connection() as conn:
            record = await conn.fetchrow(SQL_EDIT_TURN, turn_id, session_key, *edit.values())
        return None if record is None else (record["before_text"], _turn(record))

    async def undistilled_turns(
        self, session_key: str, after_id: int, now: datetime, limit: int
    ) -> list[SourceTurn]:
        """The session's live turns after ``after_id``, in id order (for distillation)."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_UNDISTILLED_TURNS, session_key, after_id, now, limit)
        return [
            SourceTurn(r["id"], r["role"], r["content"], r["sender_name"], r["created_at"])
            for r in records
        ]

    async def set_score(
        self, turn_ids: tuple[int, int], score: int, expires_at: datetime | None
    ) -> None:
        """Score an evaluated exchange (its two turns) and give them the band's expiry."""
        async with self._connection() as conn:
            await conn.execute(SQL_SET_SCORE, *turn_ids, score, expires_at)

    async def purge_expired(self, now: datetime, limit: int) -> int:
        """Delete up to ``limit`` turns expired by ``now`` (never pinned ones) in one short
        statement; how many."""
        async with self._connection() as conn:
            return rows_affected(await conn.execute(SQL_PURGE_BATCH, now, limit))

    async def keep_turns(self, turn_ids: Sequence[int]) -> bool:
        """Lock these turns against deletion until the caller's transaction ends; whether all
        of them are still there (a /forget or 撤回 arriving meanwhile waits for the end)."""
        wanted = sorted(set(turn_ids))
        if not wanted:
            return True
        async with self._connection() as conn:
            kept = await conn.fetchval(SQL_LOCK_SOURCE_TURNS, wanted)
        return bool(kept == len(wanted))

    async def groups_with_turns(self, limit: int) -> list[int]:
        async with self._connection() as conn:
            return [r["group_id"] for r in await conn.fetch(SQL_GROUPS_WITH_TURNS, limit)]

    async def turns_per_day(self, since: datetime, tz_name: str) -> list[tuple[date, int, int]]:
        """(local day, user turns, bot turns) of every day since ``since`` with turns."""
        async with self._connection() as conn:
            rows = await conn.fetch(SQL_TURNS_PER_DAY, since, tz_name)
        return [(r["day"], r["user_turns"], r["bot_turns"]) for r in rows]
