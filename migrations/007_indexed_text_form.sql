-- Which text a row is searched by (memory_core/lang/indexed.py): 0 = its content alone (every
-- row stored before this migration), 1 = "{speaker}: {content}". The embedding and the keyword
-- terms of a row were both made from the text of its form. Rows in a form other than the
-- configured one (MEMORY_INDEX_SPEAKER) are re-embedded and re-keyworded in the background, in
-- id order, a bounded batch at a time (no index is needed: the walk follows the primary key).
-- A constant default adds the column without rewriting the table.

ALTER TABLE dialogues ADD COLUMN text_form smallint NOT NULL DEFAULT 0;
