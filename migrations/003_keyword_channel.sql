-- The keyword channel. PostgreSQL's parsers keep a Chinese sentence as one token and
-- the embedded server has no pg_trgm, so the terms (CJK character bigrams; letter/digit tokens
-- such as order ids, numbers and English names, whole and split) are made in Python
-- (memory_core/keywords.py) and stored as they are with array_to_tsvector (no positions).
-- Rows stored before this migration keep NULL until the service's keyword backfill fills
-- them (the analysis lives in Python, so SQL cannot reproduce it exactly).

ALTER TABLE dialogues ADD COLUMN keywords tsvector;

-- Keyword search of one session: the GIN index finds the rows holding a term, the session
-- index narrows them; PostgreSQL combines the two with a BitmapAnd.
CREATE INDEX dialogues_keywords ON dialogues USING gin (keywords);
-- Rows still waiting for their keywords (old rows, or after a change of the analyser).
CREATE INDEX dialogues_pending_keywords ON dialogues (id) WHERE keywords IS NULL;
