"""The dialogue table as a turn's rewrite uses it (``writing.TurnWriter.rewrite``): the stored
turn a new text is made for, and the one update that puts the text and every column derived from
it in place (the console's edit, a picture read into its turn)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np

from ..lang.indexed import ContextLine
from ..models import MemoryTurn
from ..storage.pg import PgStore
from .columns import TURN_COLUMNS, turn_from_record
from .context_lines import SQL_CONTEXT_LATERAL, context_of
from .turn_rows import TextColumns

# The turn (of session $2, when not NULL) and the line it answers (``context_lines``).
SQL_REWRITE_SOURCE = f"""
SELECT d.session_key, d.content, d.sender_name, d.created_at, ctx.ctx_content, ctx.ctx_sender
FROM dialogues d {SQL_CONTEXT_LATERAL}
WHERE d.id = $1 AND ($2::text IS NULL OR d.session_key = $2)
"""

# The new text with what derives from it but its index, only while the text is still $10 (when
# not NULL: an edit in the console meanwhile wins over a picture's labels). The row is locked
# before it is read, so the text before is the one the update replaced.
SQL_REWRITE_TEXT = f"""
UPDATE dialogues
SET content = $3, token_count = $4, refers_start = $5, refers_end = $6
FROM (SELECT id AS before_id, content AS before_text FROM dialogues
      WHERE id = $1 AND session_key = $2 AND ($7::text IS NULL OR content = $7)
      FOR UPDATE) AS before
WHERE dialogues.id = before.before_id
RETURNING {TURN_COLUMNS}, before.before_text
"""

# Its index, in a statement of its own: migration 018's trigger takes a row's index on every
# update OF content (for a writer that made it without the row's line); this one was made with
# it, and the trigger does not fire on an update that leaves the content alone.
SQL_REWRITE_INDEX = """
UPDATE dialogues
SET keywords = array_to_tsvector($2::text[]), text_form = $3, embedding = $4::halfvec,
    embedding_model = $5
WHERE id = $1
"""


@dataclass(frozen=True)
class RewriteSource:
    """A stored turn as its new text is made for it."""

    session_key: str
    content: str
    sender_name: str | None
    created_at: datetime
    context: ContextLine | None


@dataclass(frozen=True)
class Rewritten:
    """A rewritten turn: its text before and the turn after."""

    before: str
    turn: MemoryTurn


class PgRewriteStore(PgStore):
    """Reads a turn for its rewrite and writes the rewrite."""

    async def source(self, turn_id: int, session_key: str | None) -> RewriteSource | None:
        """The turn (of ``session_key`` when given) with the line it answers; ``None`` when
        there is no such turn."""
        async with self._connection() as conn:
            record = await conn.fetchrow(SQL_REWRITE_SOURCE, turn_id, session_key)
        if record is None:
            return None
        return RewriteSource(
            record["session_key"],
            record["content"],
            record["sender_name"],
            record["created_at"],
            context_of(record),
        )

    async def rewrite(
        self,
        turn_id: int,
        session_key: str,
        text: TextColumns,
        *,
        embedding: np.ndarray | None,
        embedding_model: str | None,
        expected: str | None,
    ) -> Rewritten | None:
        """Put ``text`` and its index in place, both or neither; ``None`` when the turn is
        gone or (``expected`` given) its text is no longer that."""
        async with self._connection() as conn, conn.transaction():
            record = await conn.fetchrow(
                SQL_REWRITE_TEXT,
                turn_id,
                session_key,
                text.content,
                text.token_count,
                text.refers_start,
                text.refers_end,
                expected,
            )
            if record is None:
                return None
            await conn.execute(
                SQL_REWRITE_INDEX,
                turn_id,
                text.keywords,
                text.text_form,
                embedding,
                embedding_model,
            )
        return Rewritten(record["before_text"], turn_from_record(record))
