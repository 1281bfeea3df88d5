-- A run-time cached answer belongs to the chat it was given in: the private chat
-- (group_id NULL) or one group. The question itself may carry what the person said there, so
-- the same question in another chat is answered afresh and cached there on its own. Entries
-- kept from before keep the chat recorded with them (where their answer was last given).
-- Public (preloaded) entries have no chat and are served everywhere, as before.
DROP INDEX answer_cache_key;
CREATE UNIQUE INDEX answer_cache_key
    ON answer_cache (scope, coalesce(user_id, 0), coalesce(group_id, 0), question_norm);
