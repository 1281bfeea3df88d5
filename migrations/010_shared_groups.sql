-- Group-shared memory (/群共享 开|关, MEMORY_SHARED_GROUPS): in a shared group, what any member
-- said to the bot there can be recalled for every member of that group (never in another chat).
-- A row is a group admin's choice and wins over the operator's list in MEMORY_SHARED_GROUPS; a
-- group without a row follows that list (off unless listed). Nothing else refers to this table:
-- switching a group off only narrows recall again, it deletes nothing.
CREATE TABLE memory_shared_groups (
    group_id   bigint      PRIMARY KEY,
    shared     boolean     NOT NULL,
    changed_by bigint,
    changed_at timestamptz NOT NULL DEFAULT now()
);
