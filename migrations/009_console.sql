-- The operator's web console (memory_core/console): a recycle bin and an audit log.
-- A row deleted in the console is moved here whole (to_jsonb of the row, embedding and keywords
-- included) and can be put back unchanged until purge_after; the daily purge empties what is
-- older. A /forget of a person or a group empties their rows here too, like everywhere else.

CREATE TABLE memory_recycle_bin (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind         text        NOT NULL CHECK (kind IN ('turn', 'distilled')),
    item_id      bigint      NOT NULL,
    session_key  text        NOT NULL,
    user_id      bigint      NOT NULL,
    group_id     bigint,
    summary      text        NOT NULL,
    row_data     jsonb       NOT NULL,
    deleted_at   timestamptz NOT NULL DEFAULT now(),
    deleted_by   text        NOT NULL,
    purge_after  timestamptz NOT NULL,
    UNIQUE (kind, item_id)
);
CREATE INDEX memory_recycle_bin_session ON memory_recycle_bin (session_key, deleted_at);
CREATE INDEX memory_recycle_bin_purge ON memory_recycle_bin (purge_after);
CREATE INDEX memory_recycle_bin_user ON memory_recycle_bin (user_id);
CREATE INDEX memory_recycle_bin_group ON memory_recycle_bin (group_id) WHERE group_id IS NOT NULL;

-- Every change the console makes: who, when, what, and the text before and after.
CREATE TABLE memory_audit_log (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT now(),
    actor        text        NOT NULL,
    action       text        NOT NULL,
    target_kind  text        NOT NULL,
    target_id    bigint,
    session_key  text,
    before_text  text,
    after_text   text
);
CREATE INDEX memory_audit_log_at ON memory_audit_log (at DESC, id DESC);
