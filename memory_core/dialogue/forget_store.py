"""Deleting turns: a recalled (撤回) message, a person's own delete (/忘记), a /forget scope; each
with the bot's replies that depended on them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from ..lang.keywords import normalize
from ..lang.repeats import Repeats
from ..models import ForgetScope, MemoryTurn, RecalledMessage, Role, TurnInput
from ..storage.database import BULK_TIMEOUT
from ..storage.pg import PgStore, rows_affected
from ..storage.scopes import scope_count, scope_delete
from .bad_rows import usable_turn
from .columns import SQL_TURNS_BY_ID, turn_from_record

# A recalled (撤回) QQ message: its turns in the chat the notice names (a group, or a private
# chat with that user — or any private chat of the bot, when the bot recalled its own message),
# said by the sender the notice names ($4): a person's own turns, or the bot's words. Message
# ids are 32-bit hashes that two members' messages may share: a 撤回 never takes another's.
# (A private notice of the bot's own message may name the friend or the bot.)
SQL_RECALLED_TURNS = """
SELECT id, session_key, role, content FROM dialogues
WHERE qq_message_id = $1 AND ($2::bigint IS NULL OR self_id = $2)
  AND CASE WHEN $3::bigint IS NOT NULL THEN group_id = $3 ELSE group_id IS NULL END
  AND ($4::bigint IS NULL
       OR CASE WHEN role = 'user' THEN user_id = $4
               WHEN group_id IS NULL THEN $4 IN (user_id, self_id)
               ELSE self_id = $4 END)
FOR UPDATE
"""


def recalled_by(message: RecalledMessage, turn: TurnInput) -> bool:
    """Whether ``turn``, not in the database (the spool, the dead-letter file), is one
    ``SQL_RECALLED_TURNS`` would take for the recalled ``message``."""
    if turn.message_id != message.message_id or turn.group_id != message.group_id:
        return False
    if message.self_id is not None and turn.self_id != message.self_id:
        return False
    if message.user_id is None:
        return True
    if turn.role == "user":
        return turn.user_id == message.user_id
    if turn.group_id is None:
        return message.user_id in (turn.user_id, turn.self_id)
    return turn.self_id == message.user_id


def holds_word(session_key: str, folded: str, turn: TurnInput) -> bool:
    """Whether ``turn``, not in the database, is one of ``session_key`` holding the
    case-folded text ``folded`` (what ``SQL_CHOSEN_TURNS`` finds by a word)."""
    return turn.session_key == session_key and folded in normalize(turn.content)


# Turns a person deletes in one session (/忘记): these ids, and those containing the case-folded
# text $3 (NULL: none).
SQL_CHOSEN_TURNS = """
SELECT id, session_key, role, content FROM dialogues
WHERE session_key = $1
  AND (id = ANY($2::bigint[])
       OR ($3::text IS NOT NULL AND strpos(lower(normalize(content, NFKC)), $3) > 0))
ORDER BY id
"""

# The bot's reply to each of these user turns: the assistant turns of its session after it, up
# to the session's next user turn.
SQL_REPLIES_TO = """
SELECT d.id FROM dialogues u
JOIN dialogues d ON d.session_key = u.session_key AND d.role = 'assistant' AND d.id > u.id
WHERE u.id = ANY($1::bigint[]) AND u.role = 'user'
  AND d.id < coalesce(
      (SELECT min(n.id) FROM dialogues n
       WHERE n.session_key = u.session_key AND n.role = 'user' AND n.id > u.id),
      9223372036854775807)
"""

# The bot's later words in a session, read to find those repeating a deleted turn
# (``lang.repeats``); the nearest first, at most $3.
SQL_LATER_REPLIES = """
SELECT id, content FROM dialogues
WHERE session_key = $1 AND role = 'assistant' AND id > $2
ORDER BY id LIMIT $3
"""

LATER_REPLIES_READ = 2000

SQL_DELETE_TURNS = """
DELETE FROM dialogues WHERE id = ANY($1::bigint[]) RETURNING id, user_id, role, created_at
"""


@dataclass(frozen=True)
class DeletedTurn:
    """A turn deleted by a 撤回 or a person's delete (what depended on it goes next)."""

    id: int
    user_id: int
    created_at: datetime
    role: Role = "user"


async def _with_replies(
    conn: PoolConnectionProxy[asyncpg.Record], said: Sequence[asyncpg.Record]
) -> set[int]:
    """The ids of turns ``said`` (id, session_key, role, content), the bot's replies to the
    user turns among them, and the bot's later replies in their sessions that repeat them
    (``lang.repeats``: the same text found again, as the first reply is found by place)."""
    chosen = {r["id"] for r in said}
    users = [r for r in said if r["role"] == "user"]
    if not users:
        return chosen
    chosen.update(
        r["id"]
        for r in await conn.fetch(SQL_REPLIES_TO, [r["id"] for r in users], timeout=BULK_TIMEOUT)
    )
    for session_key in {r["session_key"] for r in users}:
        own = [r for r in users if r["session_key"] == session_key]
        repeated = Repeats([r["content"] for r in own])
        if not repeated:
            continue
        first = min(r["id"] for r in own)
        later = await conn.fetch(
            SQL_LATER_REPLIES, session_key, first, LATER_REPLIES_READ, timeout=BULK_TIMEOUT
        )
        chosen.update(r["id"] for r in later if repeated.found_in(r["content"]))
    return chosen


async def _delete(conn: PoolConnectionProxy[asyncpg.Record], ids: set[int]) -> list[DeletedTurn]:
    if not ids:
        return []
    records = await conn.fetch(SQL_DELETE_TURNS, sorted(ids), timeout=BULK_TIMEOUT)
    return [DeletedTurn(r["id"], r["user_id"], r["created_at"], r["role"]) for r in records]


class PgForgetStore(PgStore):
    """What a 撤回, a /忘记 and a /forget delete of the turns, and how much that is."""

    async def delete_recalled(self, message: RecalledMessage) -> list[DeletedTurn]:
        """Delete a recalled message's turns with the bot's replies to it and its later replies
        that repeat it (``with_replies``)."""
        async with self._transaction() as conn:
            said = await conn.fetch(
                SQL_RECALLED_TURNS,
                message.message_id,
                message.self_id,
                message.group_id,
                message.user_id,
            )
            return await _delete(conn, await _with_replies(conn, said))

    async def turns_to_forget(
        self, session_key: str, ids: Sequence[int], containing: str | None
    ) -> list[MemoryTurn]:
        """What ``forget_turns`` would delete now, in time order (the question before it)."""
        async with self._connection() as conn:
            said = await conn.fetch(
                SQL_CHOSEN_TURNS, session_key, list(ids), containing, timeout=BULK_TIMEOUT
            )
            chosen = await _with_replies(conn, said)
            records = await conn.fetch(SQL_TURNS_BY_ID, sorted(chosen), timeout=BULK_TIMEOUT)
        turns = (turn_from_record(r) for r in records if usable_turn(r))
        return sorted(turns, key=lambda t: (t.created_at, t.id))

    async def forget_turns(
        self, session_key: str, ids: Sequence[int], containing: str | None
    ) -> list[DeletedTurn]:
        """Delete turns of one session: ``ids``, every turn holding the case-folded text
        ``containing``, and the bot's replies to them and later replies repeating them."""
        async with self._transaction() as conn:
            said = await conn.fetch(
                SQL_CHOSEN_TURNS, session_key, list(ids), containing, timeout=BULK_TIMEOUT
            )
            return await _delete(conn, await _with_replies(conn, said))

    async def delete_scope(self, scope: ForgetScope) -> int:
        """Delete a user's, a group's, a session's or all rows of one QQ account's memory (see
        ``Forgetting.forget``)."""
        sql, args = scope_delete("dialogues", scope)
        async with self._connection() as conn:
            status = await conn.execute(sql, *args, timeout=BULK_TIMEOUT)
        return rows_affected(status)

    async def count_scope(self, scope: ForgetScope) -> int:
        """How many rows ``delete_scope`` would delete now."""
        sql, args = scope_count("dialogues", scope)
        async with self._connection() as conn:
            return int(await conn.fetchval(sql, *args, timeout=BULK_TIMEOUT))
