"""A row taken out of its table whole, to be put back as it was (the console's recycle bin):
the shape shared by the tables that hold a session's memories, each store running it on its own
table."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

SUMMARY_CHARS = 200

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


def take_sql(table: str) -> str:
    """The DELETE that takes one row of a session out of ``table`` (a constant, never input)."""
    return _TAKE.format(table=table, summary=SUMMARY_CHARS)


def put_back_sql(table: str) -> str:
    """The INSERT that puts a taken row back into ``table`` (a constant, never input)."""
    return _PUT_BACK.format(table=table)


@dataclass(frozen=True)
class TakenRow:
    """A row taken out: whose it was, its text's start, and the whole row to put back."""

    item_id: int
    session_key: str
    user_id: int
    group_id: int | None
    summary: str
    row_data: str


def taken_row(record: asyncpg.Record) -> TakenRow:
    return TakenRow(
        record["id"],
        record["session_key"],
        record["user_id"],
        record["group_id"],
        record["summary"],
        record["row_data"],
    )
