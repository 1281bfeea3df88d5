-- Distilled memory (memory_core/distill): facts, preferences and summaries
-- an LLM extracts from a session's turns, the extraction bookkeeping of each session, and the
-- semantic answer cache (memory_core/answer_cache). Raw turns stay in `dialogues`; nothing
-- here refers to them by foreign key, so purging or forgetting turns never fails because of a
-- distilled row.

CREATE TABLE distilled_memories (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind             text        NOT NULL CHECK (kind IN ('summary', 'facts', 'preferences')),
    -- whom it is about and where it was said: a group user's statements belong to that user
    -- in that group (session key "{group_id}:{user_id}"), like the turns they come from
    session_key      text        NOT NULL,
    user_id          bigint      NOT NULL,
    group_id         bigint,
    content          text        NOT NULL,
    content_hash     text        NOT NULL,
    category         text,
    confidence       double precision,                               -- facts
    strength         double precision,                               -- preferences
    evidence         text[]      NOT NULL DEFAULT '{}',  -- preferences
    key_topics       text[]      NOT NULL DEFAULT '{}',  -- summaries
    sentiment        text,                               -- summaries
    action_items     text[]      NOT NULL DEFAULT '{}',  -- summaries
    source_turn_ids  bigint[]    NOT NULL DEFAULT '{}',
    first_seen       timestamptz NOT NULL,
    last_confirmed   timestamptz NOT NULL,
    times_mentioned  integer     NOT NULL DEFAULT 1,
    base_importance  double precision NOT NULL DEFAULT 0.5,   -- from the extraction (confidence…)
    importance       double precision NOT NULL DEFAULT 0.5,   -- base raised by use, see the store
    access_count     integer     NOT NULL DEFAULT 0,
    last_accessed_at timestamptz,
    -- a superseded fact stays as history: the time it stopped being true and its successor
    valid_until      timestamptz,
    superseded_by    bigint      REFERENCES distilled_memories (id) ON DELETE SET NULL,
    embedding        halfvec,
    embedding_model  text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CHECK ((session_key = user_id::text) = (group_id IS NULL))
);
ALTER TABLE distilled_memories ALTER COLUMN embedding SET STORAGE PLAIN;

-- Exact duplicates: one current row per session, kind and normalised content.
CREATE UNIQUE INDEX distilled_current_content
    ON distilled_memories (session_key, kind, content_hash) WHERE valid_until IS NULL;
-- Recall by session (default scope) or by user (MEMORY_DISTILLED_SCOPE=user); /forget.
CREATE INDEX distilled_session ON distilled_memories (session_key, kind);
CREATE INDEX distilled_user ON distilled_memories (user_id, kind);
CREATE INDEX distilled_group ON distilled_memories (group_id) WHERE group_id IS NOT NULL;
CREATE INDEX distilled_pending_embedding ON distilled_memories (id) WHERE embedding IS NULL;

-- Extraction bookkeeping: turns up to last_turn_id are distilled; pending_turns exchanges were
-- noted since. Due when pending_turns reaches EXTRACTION_EVERY_TURNS or the session is idle.
CREATE TABLE distilled_sessions (
    session_key       text        PRIMARY KEY,
    user_id           bigint      NOT NULL,
    group_id          bigint,
    last_turn_id      bigint      NOT NULL DEFAULT 0,
    pending_turns     integer     NOT NULL DEFAULT 0,
    last_activity_at  timestamptz NOT NULL,
    last_extracted_at timestamptz,
    attempts          integer     NOT NULL DEFAULT 0,
    not_before        timestamptz NOT NULL DEFAULT '-infinity'
);
CREATE INDEX distilled_sessions_due
    ON distilled_sessions (last_activity_at) WHERE pending_turns > 0;

-- The semantic answer cache: public entries (preloaded from config/) and per-user entries.
CREATE TABLE answer_cache (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope           text        NOT NULL CHECK (scope IN ('user', 'public')),
    user_id         bigint,
    group_id        bigint,     -- where a user entry was asked (for /forget group)
    question        text        NOT NULL,
    question_norm   text        NOT NULL,
    answer          text        NOT NULL,
    source          text        NOT NULL DEFAULT 'runtime' CHECK (source IN ('runtime', 'preload')),
    hits            integer     NOT NULL DEFAULT 0,
    embedding       halfvec,
    embedding_model text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz,
    CHECK ((scope = 'user') = (user_id IS NOT NULL))
);
CREATE UNIQUE INDEX answer_cache_key ON answer_cache (scope, coalesce(user_id, 0), question_norm);
CREATE INDEX answer_cache_user ON answer_cache (user_id) WHERE user_id IS NOT NULL;
CREATE INDEX answer_cache_expires ON answer_cache (expires_at) WHERE expires_at IS NOT NULL;
