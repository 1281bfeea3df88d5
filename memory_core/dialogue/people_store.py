"""The dialogue table as an agent reads it to name people (``agents.memory``): the chats whose
person goes by a name, the name a person was last seen under in a chat, and whether a note is
already stored there. Read-only; every query stays in one QQ account's memory
(``memory_core.accounts``) and never finds a person in a chat they opted out of
(``storage.opt_outs``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..accounts import current as current_account
from ..accounts import key_account
from ..storage.opt_outs import not_opted_out
from ..storage.pg import PgStore

# A session key without its QQ account's namespace, and who and where it names (the console's
# reading of a key, dialogue.admin_store).
_BARE_KEY = "substr(s.session_key, strpos(s.session_key, '/') + 1)"

# The chats of account $1 whose person's newest name contains $2 (case-folded), the person
# last seen most recently first, at most $3. One index probe a session (the console's session
# rows, migration 011), never a scan of the turns.
SQL_CHATS_NAMED = f"""
WITH named AS (
    SELECT substr({_BARE_KEY}, strpos({_BARE_KEY}, ':') + 1)::bigint AS user_id,
           CASE WHEN strpos(s.session_key, ':') > 0
                THEN split_part({_BARE_KEY}, ':', 1)::bigint END AS group_id,
           n.sender_name, n.created_at
    FROM dialogue_sessions s
    CROSS JOIN LATERAL (
        SELECT d.sender_name, d.created_at FROM dialogues d
        WHERE d.session_key = s.session_key AND d.role = 'user' AND d.sender_name IS NOT NULL
        ORDER BY d.created_at DESC, d.id DESC LIMIT 1
    ) n
    WHERE {key_account("s.")} = $1
)
SELECT user_id, group_id, sender_name, created_at FROM named m
WHERE strpos(lower(m.sender_name), $2) > 0 AND {not_opted_out("m")}
ORDER BY m.created_at DESC, m.user_id, m.group_id NULLS FIRST LIMIT $3
"""

# The newest name a person's own turns in session $1 carry.
SQL_NEWEST_NAME = """
SELECT sender_name FROM dialogues
WHERE session_key = $1 AND role = 'user' AND sender_name IS NOT NULL
ORDER BY created_at DESC, id DESC LIMIT 1
"""

# The newest of the person's own turns in session $1 whose text is exactly $2.
SQL_SAME_TURN = """
SELECT id FROM dialogues WHERE session_key = $1 AND role = 'user' AND content = $2
ORDER BY created_at DESC, id DESC LIMIT 1
"""


@dataclass(frozen=True)
class NamedChat:
    """A person in a chat (``group_id`` ``None``: their private chat with the bot), under the
    name their newest turn there carries, and when that was."""

    user_id: int
    group_id: int | None
    name: str
    last_seen: datetime


class PgPeopleStore(PgStore):
    """People and notes by what they are called and what they say."""

    async def chats_named(self, text: str, limit: int) -> list[NamedChat]:
        """The chats whose person's newest name contains ``text`` (any case), last seen first."""
        async with self._connection() as conn:
            rows = await conn.fetch(SQL_CHATS_NAMED, current_account(), text.lower(), limit)
        return [
            NamedChat(r["user_id"], r["group_id"], r["sender_name"], r["created_at"]) for r in rows
        ]

    async def newest_name(self, session_key: str) -> str | None:
        """The name the person of ``session_key`` was last seen under there, if any."""
        async with self._connection() as conn:
            name = await conn.fetchval(SQL_NEWEST_NAME, session_key)
        return None if name is None else str(name)

    async def same_turn(self, session_key: str, content: str) -> int | None:
        """The id of the person's newest turn of ``session_key`` saying exactly ``content``."""
        async with self._connection() as conn:
            found = await conn.fetchval(SQL_SAME_TURN, session_key, content)
        return None if found is None else int(found)
