-- The time a turn talks about, besides the time it was said: "我明天上午十点
-- 要去体检" said on Monday refers to Tuesday 05:00-12:00. Filled at store time from the turn's
-- first time expression (memory_core/lang/timerange.py, spans of at most a week); NULL when it
-- names none. A recall asking about a time range also finds the turns that refer into it.
-- Rows stored before this migration keep NULL (they are found by the time they were said).

ALTER TABLE dialogues ADD COLUMN refers_start timestamptz, ADD COLUMN refers_end timestamptz;

-- Turns that refer into a range, one session at a time.
CREATE INDEX dialogues_session_refers ON dialogues (session_key, refers_start)
    WHERE refers_start IS NOT NULL;
