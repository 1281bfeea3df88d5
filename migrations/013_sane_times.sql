-- Times inside the range the memory accepts (memory_core/time_bounds.py: 1990-01-01 to
-- 2200-01-01, a time something was said no later than a day past now).
--
-- Before this, an imported line dated 0001-01-01 was stored as -infinity (asyncpg writes
-- datetime.min so) and read back without a zone, and one dated 9999-12-31 overflowed the first
-- date arithmetic: the person never got a reply again and the upkeep loop stopped at the row.
-- Such rows are repaired here (nothing is deleted): a time said too early becomes 1990-01-01, one
-- said in the future becomes now; an expiry or "valid until" past the range becomes "never", one
-- before it 1990-01-01 (already past, as it was); a time reference or last access out of range is
-- dropped. The CHECK constraints then keep every writer, not only this code, inside the range.

UPDATE dialogues SET created_at = '1990-01-01 00:00:00+00' WHERE created_at < '1990-01-01 00:00:00+00';
UPDATE dialogues SET created_at = now() WHERE created_at > now() + interval '1 day';
UPDATE dialogues SET expires_at = NULL WHERE expires_at >= '2200-01-01 00:00:00+00';
UPDATE dialogues SET expires_at = '1990-01-01 00:00:00+00' WHERE expires_at < '1990-01-01 00:00:00+00';
UPDATE dialogues SET refers_start = NULL, refers_end = NULL
 WHERE refers_start < '1990-01-01 00:00:00+00' OR refers_start >= '2200-01-01 00:00:00+00'
    OR refers_end < '1990-01-01 00:00:00+00' OR refers_end >= '2200-01-01 00:00:00+00';

UPDATE distilled_memories SET first_seen = '1990-01-01 00:00:00+00' WHERE first_seen < '1990-01-01 00:00:00+00';
UPDATE distilled_memories SET first_seen = now() WHERE first_seen > now() + interval '1 day';
UPDATE distilled_memories SET last_confirmed = greatest(first_seen, '1990-01-01 00:00:00+00')
 WHERE last_confirmed < '1990-01-01 00:00:00+00';
UPDATE distilled_memories SET last_confirmed = now() WHERE last_confirmed > now() + interval '1 day';
UPDATE distilled_memories SET created_at = first_seen
 WHERE created_at < '1990-01-01 00:00:00+00' OR created_at > now() + interval '1 day';
UPDATE distilled_memories SET last_accessed_at = NULL
 WHERE last_accessed_at < '1990-01-01 00:00:00+00' OR last_accessed_at > now() + interval '1 day';
UPDATE distilled_memories SET valid_until = NULL WHERE valid_until >= '2200-01-01 00:00:00+00';
UPDATE distilled_memories SET valid_until = '1990-01-01 00:00:00+00' WHERE valid_until < '1990-01-01 00:00:00+00';

ALTER TABLE dialogues
    ADD CONSTRAINT dialogues_created_at_in_range
        CHECK (created_at >= '1990-01-01 00:00:00+00' AND created_at < '2200-01-01 00:00:00+00'),
    ADD CONSTRAINT dialogues_expires_at_in_range
        CHECK (expires_at >= '1990-01-01 00:00:00+00' AND expires_at < '2200-01-01 00:00:00+00'),
    ADD CONSTRAINT dialogues_refers_in_range
        CHECK (refers_start >= '1990-01-01 00:00:00+00' AND refers_end < '2200-01-01 00:00:00+00');

ALTER TABLE distilled_memories
    ADD CONSTRAINT distilled_times_in_range
        CHECK (first_seen >= '1990-01-01 00:00:00+00' AND first_seen < '2200-01-01 00:00:00+00'
               AND last_confirmed >= '1990-01-01 00:00:00+00' AND last_confirmed < '2200-01-01 00:00:00+00'),
    ADD CONSTRAINT distilled_valid_until_in_range
        CHECK (valid_until >= '1990-01-01 00:00:00+00' AND valid_until < '2200-01-01 00:00:00+00');
