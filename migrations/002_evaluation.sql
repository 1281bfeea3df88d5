-- Memory evaluation: exchanges waiting to be scored survive restarts, and the
-- monitoring figures (/memstat) are counted per day so they survive restarts too.

CREATE TABLE evaluation_queue (
    assistant_turn_id bigint PRIMARY KEY REFERENCES dialogues (id) ON DELETE CASCADE,
    user_turn_id      bigint NOT NULL REFERENCES dialogues (id) ON DELETE CASCADE,
    enqueued_at       timestamptz NOT NULL DEFAULT now(),
    attempts          integer NOT NULL DEFAULT 0,
    not_before        timestamptz NOT NULL DEFAULT '-infinity'  -- due at once, whatever the clock
);
CREATE INDEX evaluation_queue_due ON evaluation_queue (not_before, enqueued_at);
CREATE INDEX evaluation_queue_user_turn ON evaluation_queue (user_turn_id);

CREATE TABLE memory_daily_stats (
    day    date   NOT NULL,
    metric text   NOT NULL,
    value  bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (day, metric)
);

-- Analysis of scores.
CREATE INDEX dialogues_score ON dialogues (score) WHERE score IS NOT NULL;
