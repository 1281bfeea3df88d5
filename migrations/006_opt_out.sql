-- Opting out of memory (/不记我, /记我): while a row matches a person and a chat, nothing of
-- theirs is stored there. `chat` is 'private', a group id as text, or '*' for every chat.
-- The dialogue inserts check it (memory_core.storage.opt_outs.NOT_OPTED_OUT), so turns spooled
-- during an outage and written later are held to the choice made meanwhile.
CREATE TABLE memory_opt_outs (
    user_id    bigint      NOT NULL,
    chat       text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, chat)
);
