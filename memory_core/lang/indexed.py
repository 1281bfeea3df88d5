"""The text a stored turn is searched by: what is embedded and cut into keyword terms.

The prompt and every display show a turn's ``content``; search sees its *indexed text*,
which depends on the row's text form (``dialogues.text_form``, migration 007):

* ``CONTENT_ONLY`` (0): the content alone — every row stored before migration 007;
* ``WITH_SPEAKER`` (1): ``"{speaker}: {content}"``, the speaker being the sender's card or
  nickname, or the bot's own name on its replies, so that "小明说的那家店" or "Caroline's
  support group" can match on who said it. A turn without a name keeps its content alone.

A form is a set of bits: ``WITH_SPEAKER`` (1); ``CONTEXT_IN_VECTOR`` (2) and
``CONTEXT_IN_KEYWORDS`` (4), the line the turn answers (``MEMORY_INDEX_CONTEXT``: the latest
turn of the other role in the same session, at most ``CONTEXT_MAX_GAP`` earlier, cut to
``CONTEXT_MAX_CHARS``) put before it in the text embedded, or cut into keyword terms with it,
so that "Yes, last Tuesday!" is found by what it answers. That line is read from the database
by one rule (``dialogue.context_lines``) whichever path indexes the row; a row whose line
changes (deleted, edited, or a turn stored between them) loses its embedding and keywords in
the same statement (migration 018) and the backfills make them again.

``MEMORY_INDEX_SPEAKER`` and ``MEMORY_INDEX_CONTEXT`` pick the form new rows get; rows in
another form are re-indexed in the background (``DialogueUpkeep.reindex_text_form``) or by
``reembed``.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final, Literal, NamedTuple

CONTENT_ONLY: Final = 0
WITH_SPEAKER: Final = 1
CONTEXT_IN_VECTOR: Final = 2
CONTEXT_IN_KEYWORDS: Final = 4
WITH_CONTEXT: Final = CONTEXT_IN_VECTOR | CONTEXT_IN_KEYWORDS
TEXT_FORMS = tuple(range(8))

IndexContext = Literal["off", "vector", "keyword", "both"]
CONTEXT_BITS: dict[str, int] = {
    "off": 0,
    "vector": CONTEXT_IN_VECTOR,
    "keyword": CONTEXT_IN_KEYWORDS,
    "both": WITH_CONTEXT,
}
# The line a turn answers is at most this much older (a reply hours later answers no line), and
# only its first characters count: it says what the turn is about, it is not a second turn.
# Migration 018 holds the same gap.
CONTEXT_MAX_GAP: Final = timedelta(hours=1)
CONTEXT_MAX_CHARS: Final = 200

# One line, and short: a name is a label, not a second message.
SPEAKER_MAX_CHARS = 64


def speaker_label(sender_name: str | None) -> str | None:
    """The sender's name on one line, or ``None`` when there is none to show."""
    if not sender_name:
        return None
    label = " ".join(sender_name.split())[:SPEAKER_MAX_CHARS]
    return label or None


def text_form_for(index_speaker: bool, index_context: str) -> int:
    """The form the settings ``MEMORY_INDEX_SPEAKER`` and ``MEMORY_INDEX_CONTEXT`` give."""
    return (WITH_SPEAKER if index_speaker else CONTENT_ONLY) | CONTEXT_BITS[index_context]


class ContextLine(NamedTuple):
    """The line a turn answers, as stored: its content and sender name."""

    content: str
    sender_name: str | None


class IndexTexts(NamedTuple):
    """What a turn is embedded by and what it is cut into keyword terms from."""

    vector: str
    keywords: str


def _line(content: str, sender_name: str | None, form: int) -> str:
    label = speaker_label(sender_name) if form & WITH_SPEAKER else None
    return f"{label}: {content}" if label else content


def indexed_text(content: str, sender_name: str | None, form: int) -> str:
    """What a turn in text form ``form`` is embedded and keyword-indexed by, without the line
    it answers (``index_texts`` adds it)."""
    if form not in TEXT_FORMS:
        raise ValueError(f"unknown text form {form!r}")
    return _line(content, sender_name, form)


def index_texts(
    content: str, sender_name: str | None, form: int, context: ContextLine | None = None
) -> IndexTexts:
    """The texts a turn in form ``form`` is embedded and keyworded by; ``context`` is the line
    it answers (``None``: none within the gap), used by the form's context bits."""
    own = indexed_text(content, sender_name, form)
    if context is None or not form & WITH_CONTEXT:
        return IndexTexts(own, own)
    before = _line(" ".join(context.content.split())[:CONTEXT_MAX_CHARS], context.sender_name, form)
    with_context = f"{before}\n{own}" if before else own
    return IndexTexts(
        with_context if form & CONTEXT_IN_VECTOR else own,
        with_context if form & CONTEXT_IN_KEYWORDS else own,
    )
