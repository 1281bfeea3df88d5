-- Pictures remembered, tried again (memory_core.pictures.reader, PictureReader.retry_skipped):
-- a picture not read for a passing reason (the per-minute budget, a full queue, a timeout) is
-- read by a later retry round, at most MEMORY_IMAGE_READ_ATTEMPTS times in all.
--
-- attempts: how many times the picture was tried (the first reading included).
-- declined: not read by policy (a sticker larger than MEMORY_IMAGE_STICKER_MAX_BYTES), never
-- tried again; 'skipped' now means only "may be read later".
ALTER TABLE turn_pictures ADD COLUMN attempts smallint NOT NULL DEFAULT 1;
ALTER TABLE turn_pictures DROP CONSTRAINT turn_pictures_status_check;
ALTER TABLE turn_pictures ADD CONSTRAINT turn_pictures_status_check
    CHECK (status IN ('read', 'refused', 'skipped', 'declined'));
-- The retry rounds look only at pictures still to be read.
CREATE INDEX turn_pictures_skipped ON turn_pictures (turn_id) WHERE status = 'skipped';
