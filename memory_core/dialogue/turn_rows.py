"""Validating a ``TurnInput`` and turning it into a row ready to insert, and the one rule by which
a turn's text becomes its derived columns (``text_columns``): the write path, the console's edit
and the picture reader (``writing.TurnWriter.rewrite``) all go through it."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any

from ..errors import InvalidTurnError
from ..lang.indexed import CONTENT_ONLY, WITH_CONTEXT, ContextLine, index_texts
from ..lang.keywords import document_terms
from ..lang.text import clean_content, scrub, scrub_json
from ..lang.timerange import referred_range
from ..lang.tokens import TokenCounter
from ..models import TurnInput
from ..time_bounds import time_problem
from .columns import NewTurnRow

BIGINT_MAX = 2**63 - 1
ROLES = ("user", "assistant")
SENDER_NAME_MAX = 64


def _check_id(name: str, value: object, *, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTurnError(f"{name} must be an integer, got {value!r}")
    if not -BIGINT_MAX - 1 <= value <= BIGINT_MAX:
        raise InvalidTurnError(f"{name} {value} does not fit in a 64-bit integer")


def message_uuid_for(turn: TurnInput) -> str:
    """A stable id for dedupe: derived from the QQ message when there is one."""
    if turn.message_uuid:
        return turn.message_uuid
    if turn.message_id is not None:
        # NapCat's and go-cqhttp's ids are 32-bit hashes: two members' messages in a group may
        # share one, so the sender is part of the key.
        where = (
            f"g{turn.group_id}:u{turn.user_id}" if turn.group_id is not None else f"p{turn.user_id}"
        )
        return f"qq:{turn.self_id or 0}:{where}:{turn.role}:{turn.message_id}"
    return f"local:{uuid.uuid4()}"


def _scrubbed(turn: TurnInput) -> TurnInput:
    """``turn`` with its text made storable by ``lang.text.scrub``: content, sender name and raw
    segments (keys and values)."""
    content = scrub(turn.content) if isinstance(turn.content, str) else turn.content
    sender = None if turn.sender_name is None else scrub(str(turn.sender_name))
    segments = None if turn.raw_segments is None else scrub_json(turn.raw_segments)
    return dataclasses.replace(turn, content=content, sender_name=sender, raw_segments=segments)


def raw_segments_json(segments: Sequence[dict[str, Any]] | None) -> str | None:
    if segments is None:
        return None
    # Segments arrive scrubbed (_scrubbed): no NUL, which jsonb refuses, is left.
    return json.dumps(list(segments), ensure_ascii=False, default=str)


@dataclass(frozen=True)
class TextColumns:
    """What a turn's stored text gives its row: the text itself, its token count, the time it
    talks about, and what it is searched by (keyword terms; ``indexed``, the text to embed)."""

    content: str
    token_count: int
    refers_start: datetime | None
    refers_end: datetime | None
    keywords: list[str]
    text_form: int
    indexed: str


def cleaned_text(text: object, max_chars: int) -> str:
    """Text made storable: scrubbed (``lang.text.scrub``) and cut to ``max_chars``;
    ``InvalidTurnError`` for non-text or blank text."""
    return clean_content(scrub(text) if isinstance(text, str) else text, max_chars)


def text_columns(
    content: str,
    *,
    sender_name: str | None,
    created_at: datetime,
    text_form: int,
    context: ContextLine | None,
    token_counter: TokenCounter,
    tz: tzinfo,
) -> TextColumns:
    """The columns derived from a turn's (cleaned) ``content``: tokens, the time range it talks
    about (relative to the turn's own time), and its index in ``text_form`` with ``context``,
    the line it answers (``context_lines``; used when the form says so)."""
    refers = referred_range(content, created_at, tz)
    texts = index_texts(content, sender_name, text_form, context)
    return TextColumns(
        content=content,
        token_count=token_counter.count(content),
        refers_start=refers.start if refers is not None else None,
        refers_end=refers.end if refers is not None else None,
        keywords=document_terms(texts.keywords),
        text_form=text_form,
        indexed=texts.vector,
    )


def prepare_row(
    turn: TurnInput,
    *,
    now: datetime,
    max_chars: int,
    token_counter: TokenCounter,
    tz: tzinfo,
    text_form: int = CONTENT_ONLY,
) -> tuple[TurnInput, NewTurnRow]:
    """Validate ``turn`` (``InvalidTurnError`` naming the problem) and build its row, without an
    embedding; its keywords (and ``indexed``, the text to embed) in ``text_form``.

    Returns the turn as it was stored too: its text scrubbed (``lang.text.scrub``, the one
    scrub a turn's text gets on its way in) and stamped with the row's ``message_uuid`` and
    ``created_at``, so that the row written, the line spooled if the write fails and the text
    embedded are the same, and a spooled turn is stored under the same key when it comes back.
    """
    turn = _scrubbed(turn)
    if turn.role not in ROLES:
        raise InvalidTurnError(f"role must be 'user' or 'assistant', got {turn.role!r}")
    _check_id("user_id", turn.user_id, optional=False)
    _check_id("group_id", turn.group_id, optional=True)
    _check_id("self_id", turn.self_id, optional=True)
    _check_id("message_id", turn.message_id, optional=True)
    created_at = turn.created_at or now
    problem = time_problem(created_at, now=now)
    if problem is not None:
        raise InvalidTurnError(f"created_at {problem}")
    sender = turn.sender_name[:SENDER_NAME_MAX] if turn.sender_name else None
    text = text_columns(
        clean_content(turn.content, max_chars),
        sender_name=sender,
        created_at=created_at,
        text_form=text_form,
        context=None,  # read from the database by the writer (``with_context``)
        token_counter=token_counter,
        tz=tz,
    )
    row = NewTurnRow(
        message_uuid=message_uuid_for(turn),
        self_id=turn.self_id,
        session_key=turn.session_key,
        user_id=turn.user_id,
        group_id=turn.group_id,
        chat_type=turn.chat_type,
        role=turn.role,
        content=text.content,
        sender_name=sender or None,
        qq_message_id=turn.message_id,
        raw_segments=raw_segments_json(turn.raw_segments),
        embedding=None,
        embedding_model=None,
        token_count=text.token_count,
        created_at=created_at,
        refers_start=text.refers_start,
        refers_end=text.refers_end,
        keywords=text.keywords,
        text_form=text.text_form,
        indexed=text.indexed,
    )
    stamped = dataclasses.replace(turn, message_uuid=row.message_uuid, created_at=created_at)
    return stamped, row


def with_context(row: NewTurnRow, context: ContextLine | None) -> NewTurnRow:
    """``row`` indexed with the line it answers (``context_lines``), as its form says."""
    if context is None or not row.text_form & WITH_CONTEXT:
        return row
    texts = index_texts(row.content, row.sender_name, row.text_form, context)
    return dataclasses.replace(row, indexed=texts.vector, keywords=document_terms(texts.keywords))
