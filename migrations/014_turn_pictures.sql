-- Pictures remembered (memory_core/pictures): what each picture of a stored turn said, by the
-- hash of its bytes (the bytes themselves are never kept). The text also lives in the turn's own
-- content ("[图片：文字 …]"), which is what the prompt, the search channels and every export see;
-- this row is how a picture seen again is not read again.
--
-- The row belongs to its turn: ON DELETE CASCADE, so a 撤回, a /forget, the console's delete and
-- the expiry purge take it with the turn, and a picture whose every turn is gone is read anew.
CREATE TABLE turn_pictures (
    turn_id    bigint      NOT NULL REFERENCES dialogues (id) ON DELETE CASCADE,
    position   smallint    NOT NULL,
    -- the QQ client's own name of the picture when it is a content digest (NapCat's
    -- "<md5>.jpg"): a picture seen again is then known before it is fetched
    file_key   text,
    sha256     bytea,
    -- read: text (possibly none) was read; refused: fetching or decoding failed for a reason
    -- that will not change (too big, not a picture, 404); skipped: not read (budget, a big
    -- sticker), may be read when it comes again
    status     text        NOT NULL CHECK (status IN ('read', 'refused', 'skipped')),
    text       text        NOT NULL DEFAULT '',
    -- what an optional vision model (VISION_MODEL) said the picture shows; '' without one
    description text       NOT NULL DEFAULT '',
    read_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (turn_id, position)
);
CREATE INDEX turn_pictures_sha256 ON turn_pictures (sha256) WHERE sha256 IS NOT NULL;
CREATE INDEX turn_pictures_file_key ON turn_pictures (file_key) WHERE file_key IS NOT NULL;
