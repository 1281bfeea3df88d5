"""What the console does to one row of a session, in the shape shared by the tables that hold
a session's memories: edit it (returning its text before, for the audit log), take it out whole
(into the recycle bin) and put it back as it was. Each owning store builds the statements on its
own table; ``RowTaker`` runs the last two."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .pg import PgStore

SUMMARY_CHARS = 200

# The row is locked before it is read, so the text before is the one the update replaced.
_EDIT = """
UPDATE {table} SET {changes}
FROM (SELECT id AS before_id, content AS before_text FROM {table}
      WHERE id = $1 AND session_key = $2 FOR UPDATE) AS before
WHERE {table}.id = before.before_id
RETURNING {columns}, before.before_text
"""

# Nothing happens for a row of another session. ``row_data`` is the whole row as jsonb text.
_TAKE = """
DELETE FROM {table} WHERE id = $1 AND session_key = $2
RETURNING id, session_key, user_id, group_id, left(content, {summary}) AS summary,
          to_jsonb({table})::text AS row_data
"""
# The row goes back as it was, with its id (OVERRIDING SYSTEM VALUE: the identity column);
# a row taken before a column was added gets that column's default (``pinned``: migration 011).
_PUT_BACK = """
INSERT INTO {table} OVERRIDING SYSTEM VALUE
SELECT * FROM jsonb_populate_record(NULL::{table}, '{{"pinned": false}}'::jsonb || $1::jsonb)
"""


def edit_sql(table: str, changes: str, columns: str) -> str:
    """The UPDATE of one row of a session (``$1`` id, ``$2`` session key; ``changes`` use
    ``$3``…) returning ``columns`` and ``before_text``; all three are constants, never input."""
    return _EDIT.format(table=table, changes=changes, columns=columns)


def take_sql(table: str) -> str:
    """The DELETE that takes one row of a session out of ``table`` (a constant, never input)."""
    return _TAKE.format(table=table, summary=SUMMARY_CHARS)


def put_back_sql(table: str) -> str:
    """The INSERT that puts a taken row back into ``table`` (a constant, never input)."""
    return _PUT_BACK.format(table=table)


@dataclass(frozen=True)
class TakenRow:
    """A row taken out: whose it was, its text's start, and the whole row to put back (the
    columns of ``_TAKE``, in order)."""

    item_id: int
    session_key: str
    user_id: int
    group_id: int | None
    summary: str
    row_data: str


class RowTaker(PgStore):
    """A store whose table's rows the console takes out whole and puts back (its recycle
    bin); the owner names its two statements."""

    SQL_TAKE: ClassVar[str]
    SQL_PUT_BACK: ClassVar[str]

    async def take_row(self, session_key: str, item_id: int) -> TakenRow | None:
        """Delete a row of this session, returning it whole; ``None`` if there is none."""
        async with self._connection() as conn:
            record = await conn.fetchrow(self.SQL_TAKE, item_id, session_key)
        return None if record is None else TakenRow(*record)  # the columns of ``_TAKE``

    async def put_back_row(self, row_data: str) -> None:
        """Insert a row taken by ``take_row`` again, as it was."""
        async with self._connection() as conn:
            await conn.execute(self.SQL_PUT_BACK, row_data)
