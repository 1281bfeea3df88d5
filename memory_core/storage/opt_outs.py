"""All SQL of ``memory_opt_outs`` (migration 006): who asked not to be remembered, and where;
a row of user ``EVERYONE`` switches memory off for a whole group.

``NOT_OPTED_OUT`` is the condition the dialogue inserts add, so every way a turn reaches the
table (a message, the passive group recorder, a spool flush, an import) honours the choice.
"""

from __future__ import annotations

from .pg import PgStore, rows_affected

EVERYWHERE = "*"
# The user id of a whole chat's opt-out (a group admin switched memory off): QQ has no user 0.
EVERYONE = 0

# A row's chat as this table names it: 'private' or the group id.
_CHAT_OF = "coalesce({alias}.group_id::text, 'private')"


def not_opted_out(alias: str) -> str:
    """``NOT EXISTS`` an opt-out of ``alias``'s user in ``alias``'s chat (or everywhere);
    ``alias`` is a constant table alias of the caller's SQL, never user input."""
    return (
        f"NOT EXISTS (SELECT 1 FROM memory_opt_outs o "
        f"WHERE o.user_id IN ({alias}.user_id, {EVERYONE}) "
        f"AND o.chat IN ('{EVERYWHERE}', {_CHAT_OF.format(alias=alias)}))"
    )


SQL_OPT_OUT = """
INSERT INTO memory_opt_outs (user_id, chat) VALUES ($1, $2) ON CONFLICT DO NOTHING
"""
SQL_OPT_IN = "DELETE FROM memory_opt_outs WHERE user_id = $1 AND chat = $2"
SQL_OPT_IN_EVERYWHERE = "DELETE FROM memory_opt_outs WHERE user_id = $1"
SQL_CHATS_OPTED_OUT = "SELECT chat FROM memory_opt_outs WHERE user_id = $1"
# The same test as ``not_opted_out`` for one person in one chat ($2: the chat's name).
SQL_OPTED_OUT_HERE = f"""
SELECT EXISTS (SELECT 1 FROM memory_opt_outs
               WHERE user_id IN ($1, {EVERYONE}) AND chat IN ('{EVERYWHERE}', $2))
"""


def chat_name(group_id: int | None) -> str:
    return "private" if group_id is None else str(group_id)


class PgOptOutStore(PgStore):
    """The opt-out table."""

    async def opt_out(self, user_id: int, chat: str) -> bool:
        """Record the opt-out; whether it is new."""
        async with self._connection() as conn:
            return rows_affected(await conn.execute(SQL_OPT_OUT, user_id, chat)) > 0

    async def opt_in(self, user_id: int, chat: str | None) -> int:
        """Drop the opt-out of ``chat`` (``None``: every one); how many went."""
        async with self._connection() as conn:
            if chat is None:
                status = await conn.execute(SQL_OPT_IN_EVERYWHERE, user_id)
            else:
                status = await conn.execute(SQL_OPT_IN, user_id, chat)
        return rows_affected(status)

    async def opted_out(self, user_id: int, group_id: int | None) -> bool:
        """Whether nothing may be kept of ``user_id`` in this chat (their own opt-out here or
        everywhere, or the whole group's)."""
        async with self._connection() as conn:
            return bool(await conn.fetchval(SQL_OPTED_OUT_HERE, user_id, chat_name(group_id)))

    async def chats(self, user_id: int) -> set[str]:
        """The chats ``user_id`` opted out of (``EVERYWHERE`` for all)."""
        async with self._connection() as conn:
            return {r["chat"] for r in await conn.fetch(SQL_CHATS_OPTED_OUT, user_id)}
