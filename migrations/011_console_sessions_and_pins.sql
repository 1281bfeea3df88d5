-- The operator's console, second version.
--
-- 1. One row per session with turns: how many and the newest one, kept by statement-level
--    triggers on dialogues. The console's session list reads these rows (a few thousand) and
--    not the turns (a probe per session per column before: 400 ms p95 at 100k turns).
--    The triggers lock the sessions they touch in session_key order, so two statements that
--    touch the same sessions (an import and the daily purge) queue instead of deadlocking.
-- 2. Pinned turns and distilled memories: the operator keeps them; the evaluator gives a
--    pinned turn no expiry and the purge never deletes it; a pinned memory is never merged
--    away as a duplicate.

CREATE TABLE dialogue_sessions (
    session_key text        PRIMARY KEY,
    turns       bigint      NOT NULL,
    last_at     timestamptz NOT NULL
);
CREATE INDEX dialogue_sessions_last ON dialogue_sessions (last_at DESC, session_key);

INSERT INTO dialogue_sessions (session_key, turns, last_at)
SELECT session_key, count(*), max(created_at) FROM dialogues GROUP BY session_key;

CREATE FUNCTION dialogue_sessions_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO dialogue_sessions AS s (session_key, turns, last_at)
    SELECT session_key, count(*), max(created_at) FROM added_turns
    GROUP BY session_key ORDER BY session_key
    ON CONFLICT (session_key) DO UPDATE
    SET turns = s.turns + excluded.turns, last_at = greatest(s.last_at, excluded.last_at);
    RETURN NULL;
END $$;

-- After a delete the newest remaining turn is looked up (an index probe) only for the sessions
-- whose newest turn went; a session left without turns loses its row.
CREATE FUNCTION dialogue_sessions_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM dialogue_sessions
    WHERE session_key IN (SELECT session_key FROM removed_turns)
    ORDER BY session_key FOR UPDATE;
    UPDATE dialogue_sessions s
    SET turns = s.turns - r.n,
        last_at = CASE WHEN r.newest < s.last_at THEN s.last_at
                       ELSE coalesce((SELECT max(d.created_at) FROM dialogues d
                                      WHERE d.session_key = s.session_key), s.last_at) END
    FROM (SELECT session_key, count(*) AS n, max(created_at) AS newest
          FROM removed_turns GROUP BY session_key) r
    WHERE s.session_key = r.session_key;
    DELETE FROM dialogue_sessions
    WHERE turns <= 0 AND session_key IN (SELECT session_key FROM removed_turns);
    RETURN NULL;
END $$;

CREATE TRIGGER dialogue_sessions_on_insert AFTER INSERT ON dialogues
REFERENCING NEW TABLE AS added_turns
FOR EACH STATEMENT EXECUTE FUNCTION dialogue_sessions_added();

CREATE TRIGGER dialogue_sessions_on_delete AFTER DELETE ON dialogues
REFERENCING OLD TABLE AS removed_turns
FOR EACH STATEMENT EXECUTE FUNCTION dialogue_sessions_removed();

ALTER TABLE dialogues ADD COLUMN pinned boolean NOT NULL DEFAULT false;
ALTER TABLE distilled_memories ADD COLUMN pinned boolean NOT NULL DEFAULT false;
