-- A group message's short-term window is the group's last turns (every member's session of the
-- group, memory_core/dialogue/recall_store.py SQL_GROUP_TAIL): read on every group message, so
-- the newest turns of one group are found on an index, not by sorting all of its turns.
CREATE INDEX dialogues_group_time ON dialogues (group_id, created_at, id) WHERE group_id IS NOT NULL;
