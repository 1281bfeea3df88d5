-- A turn indexed with the line it answers (MEMORY_INDEX_CONTEXT, memory_core/lang/indexed.py):
-- text forms with bit 2 (the line in the embedded text) or bit 4 (in the keyword terms). Such a
-- row's embedding and keywords hold words of another row: when that row is deleted (a 撤回, a
-- /忘记, a /forget, the purge), edited, or a turn is stored between the two, the index of the
-- rows it may be the line of (the other role's rows of its session within the hour after it,
-- the gap of memory_core/lang/indexed.py CONTEXT_MAX_GAP) is taken away in the same statement
-- and the backfills make it again from the line they then answer: a deleted line's words are
-- not found through its answer. The index of an edited row itself goes too (its own line is
-- read again). Rows in a form without those bits are never touched, and the partial index
-- below is empty while the setting is off, so the triggers cost a probe of an empty index.

CREATE INDEX dialogues_context_form ON dialogues (session_key, created_at, id)
    WHERE text_form & 6 <> 0;

-- For the statement-level triggers: "changed" is the transition table (rows inserted or deleted).
CREATE FUNCTION dialogues_lines_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE dialogues d SET keywords = NULL, embedding = NULL
    FROM changed c
    WHERE d.text_form & 6 <> 0 AND d.session_key = c.session_key AND d.role <> c.role
      AND (d.created_at, d.id) > (c.created_at, c.id)
      AND d.created_at <= c.created_at + interval '3600 seconds'
      AND (d.keywords IS NOT NULL OR d.embedding IS NOT NULL)
      AND NOT EXISTS (SELECT 1 FROM changed n WHERE n.id = d.id);
    RETURN NULL;
END
$$;

CREATE TRIGGER dialogues_lines_inserted AFTER INSERT ON dialogues
    REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION dialogues_lines_changed();

CREATE TRIGGER dialogues_lines_deleted AFTER DELETE ON dialogues
    REFERENCING OLD TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION dialogues_lines_changed();

-- An edited turn (the console, a picture read into its text): its own index and its answers'.
-- Every statement setting the content fires it, even to the same text: those writers make the
-- row's own index without its line, so the backfills must make it again.
CREATE FUNCTION dialogues_line_edited() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.text_form & 6 <> 0 THEN
        NEW.keywords := NULL;
        NEW.embedding := NULL;
    END IF;
    UPDATE dialogues d SET keywords = NULL, embedding = NULL
    WHERE d.text_form & 6 <> 0 AND d.session_key = NEW.session_key AND d.role <> NEW.role
      AND (d.created_at, d.id) > (NEW.created_at, NEW.id)
      AND d.created_at <= NEW.created_at + interval '3600 seconds'
      AND (d.keywords IS NOT NULL OR d.embedding IS NOT NULL);
    RETURN NEW;
END
$$;

CREATE TRIGGER dialogues_line_edited BEFORE UPDATE OF content ON dialogues
    FOR EACH ROW EXECUTE FUNCTION dialogues_line_edited();
