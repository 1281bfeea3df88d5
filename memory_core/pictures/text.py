"""How what a picture says is written into its turn: ``[图片]`` becomes ``[图片：文字 …]``.

The turn is stored at once with the placeholder the plugin gave each picture (``[图片]``,
``[动画表情]``); when the picture has been read, each placeholder of the message's own pictures is
replaced by a label carrying the text. The derived part always has the same shape (the
placeholder's word, a full-width colon, then ``文字 …``), so the console can mark it and a reader
can tell it from what the person typed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# Brackets inside the text would end the label early for a reader (and for the console's mark).
_BRACKETS = str.maketrans({"[": "［", "]": "］"})
LABEL_SEPARATOR = "："
TEXT_WORD = "文字"
DERIVED_LABEL = re.compile(
    r"\[[^\[\]：]{1,20}：(?:[^\]]*；)?文字 [^\]]*\]|\[(?:图片|动画表情)：[^\]]+\]"
)
"""What a derived label looks like in a turn's text (the console marks these)."""


def picture_text(lines: Sequence[str], max_chars: int) -> str:
    """The lines a picture was read as, on one line, at most ``max_chars`` (cut with ``…``)."""
    text = " ".join(" ".join(line.split()) for line in lines if line and line.strip())
    text = text.translate(_BRACKETS)
    if len(text) > max_chars:
        text = text[: max(max_chars - 1, 0)].rstrip() + "…"
    return text


def derived_label(placeholder: str, text: str, description: str = "") -> str:
    """``[图片]`` with its text (and an optional description) inside: ``[图片：文字 …]``,
    ``[图片：一只橘猫；文字 …]``; the placeholder unchanged when there is neither."""
    word = placeholder.strip()[1:-1] if placeholder.startswith("[") else placeholder
    parts = [description.translate(_BRACKETS)] if description else []
    if text:
        parts.append(f"{TEXT_WORD} {text}")
    if not parts:
        return placeholder
    return f"[{word}{LABEL_SEPARATOR}{'；'.join(parts)}]"


def with_labels(content: str, labels: Sequence[tuple[str, str]]) -> str | None:
    """``content`` with the message's pictures' placeholders replaced by their labels
    (``(placeholder, label)`` in the order the pictures came), or ``None`` when a placeholder
    is not where it should be (the text was edited meanwhile) or nothing changes.

    The pictures are the message's last placeholders: a quoted message (``[回复 …]``) comes
    before the message's own text, so its pictures are left as they are.
    """
    end = len(content)
    pieces: list[str] = []
    for placeholder, label in reversed(labels):
        at = content.rfind(placeholder, 0, end)
        if at < 0:
            return None
        pieces.append(label + content[at + len(placeholder) : end])
        end = at
    changed = content[:end] + "".join(reversed(pieces))
    return changed if changed != content else None
