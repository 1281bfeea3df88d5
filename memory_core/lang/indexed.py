"""The text a stored turn is searched by: what is embedded and cut into keyword terms.

The prompt and every display show a turn's ``content``; search sees its *indexed text*,
which depends on the row's text form (``dialogues.text_form``, migration 007):

* ``CONTENT_ONLY`` (0): the content alone — every row stored before migration 007;
* ``WITH_SPEAKER`` (1): ``"{speaker}: {content}"``, the speaker being the sender's card or
  nickname, or the bot's own name on its replies, so that "小明说的那家店" or "Caroline's
  support group" can match on who said it. A turn without a name keeps its content alone.

``MEMORY_INDEX_SPEAKER`` picks the form new rows get; rows in the other form are re-indexed
in the background (``TemporalMemory.reindex_text_form``) or by ``reembed``.
"""

from __future__ import annotations

from typing import Final

CONTENT_ONLY: Final = 0
WITH_SPEAKER: Final = 1
TEXT_FORMS = (CONTENT_ONLY, WITH_SPEAKER)

# One line, and short: a name is a label, not a second message.
SPEAKER_MAX_CHARS = 64


def speaker_label(sender_name: str | None) -> str | None:
    """The sender's name on one line, or ``None`` when there is none to show."""
    if not sender_name:
        return None
    label = " ".join(sender_name.split())[:SPEAKER_MAX_CHARS]
    return label or None


def indexed_text(content: str, sender_name: str | None, form: int) -> str:
    """What a turn in text form ``form`` is embedded and keyword-indexed by."""
    if form not in TEXT_FORMS:
        raise ValueError(f"unknown text form {form!r}")
    label = speaker_label(sender_name) if form == WITH_SPEAKER else None
    return f"{label}: {content}" if label else content
