-- Each QQ bot account's memory its own (memory_core/accounts.py, MEMORY_SHARE_ACCOUNTS).
--
-- An account's memory is a namespace of session keys: "{self_id}/" before the key ("B/123",
-- "B/456:123"). The first account that connects owns the keys without a prefix: every row stored
-- before this migration stays as it is and is that account's (memory_meta 'first_account',
-- written on the first connect, said once in the log). Nothing is rewritten here.
--
-- A distilled memory's key said "private" by being the bare user id; with a prefix it is the
-- key's last part that must be, so the check reads that part.
ALTER TABLE distilled_memories DROP CONSTRAINT distilled_memories_check;
ALTER TABLE distilled_memories ADD CONSTRAINT distilled_memories_private_key
    CHECK ((substr(session_key, strpos(session_key, '/') + 1) = user_id::text) = (group_id IS NULL));

-- A person's cached answer has no session key: it names its account's namespace ('' = the first
-- account's, as every entry cached before). Public (preloaded) entries stay everyone's.
ALTER TABLE answer_cache ADD COLUMN account text NOT NULL DEFAULT '';
DROP INDEX answer_cache_key;
CREATE UNIQUE INDEX answer_cache_key
    ON answer_cache (scope, account, coalesce(user_id, 0), coalesce(group_id, 0), question_norm);
