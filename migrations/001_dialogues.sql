-- The dialogue table: who said what and when, plus the bot account (self_id),
-- the session key, the raw OneBot segments and the embedding model of each row.
-- The embedding column has no fixed dimension; the HNSW index is an expression index on
-- embedding::halfvec(N), created by the core for the configured dimension.

CREATE TABLE dialogues (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_uuid    text        NOT NULL UNIQUE,
    self_id         bigint,
    session_key     text        NOT NULL,
    user_id         bigint      NOT NULL,
    group_id        bigint,
    chat_type       text        NOT NULL CHECK (chat_type IN ('private', 'group')),
    role            text        NOT NULL CHECK (role IN ('user', 'assistant')),
    content         text        NOT NULL,
    sender_name     text,
    qq_message_id   bigint,
    raw_segments    jsonb,
    embedding       halfvec,
    embedding_model text,
    token_count     integer     NOT NULL DEFAULT 0,
    score           smallint    CHECK (score BETWEEN 0 AND 100),
    expires_at      timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CHECK ((chat_type = 'group') = (group_id IS NOT NULL))
);

-- The embedding is read by distance, never compressed well: keep it inline.
ALTER TABLE dialogues ALTER COLUMN embedding SET STORAGE PLAIN;

-- Session-scoped recall and window expansion walk one session in time order.
CREATE INDEX dialogues_session_time ON dialogues (session_key, created_at, id);
-- The purge.
CREATE INDEX dialogues_expires_at ON dialogues (expires_at) WHERE expires_at IS NOT NULL;
-- Turns stored while the embedder was down, embedded later.
CREATE INDEX dialogues_pending_embedding ON dialogues (id) WHERE embedding IS NULL;
-- Recall notices name a QQ message id.
CREATE INDEX dialogues_qq_message ON dialogues (qq_message_id) WHERE qq_message_id IS NOT NULL;
-- /forget by user or by group.
CREATE INDEX dialogues_user ON dialogues (user_id);
CREATE INDEX dialogues_group ON dialogues (group_id) WHERE group_id IS NOT NULL;

CREATE TABLE memory_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
