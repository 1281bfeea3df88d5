"""Making arbitrary user text safe to store, embed and count."""

from __future__ import annotations

import re
import unicodedata

from ..errors import InvalidTurnError

_TRAILING_PUNCTUATION = re.compile(r"[\s。.!！?？~～、,，;；:：]+$")

TRUNCATION_MARK = "…[内容过长，已截断 {dropped} 字]"


def scrub(text: str) -> str:
    """Drop NUL (PostgreSQL text rejects it) and replace unpaired surrogates with U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", "")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def clean_content(text: object, max_chars: int) -> str:
    """Return storable content, or raise ``InvalidTurnError`` for non-text or blank text.

    Text longer than ``max_chars`` is cut with a visible mark saying how much was dropped, so
    nothing is cut silently.
    """
    if not isinstance(text, str):
        raise InvalidTurnError(f"content must be text, got {type(text).__name__}")
    text = scrub(text)
    if not text.strip():
        raise InvalidTurnError("content is empty or whitespace only")
    if len(text) > max_chars:
        dropped = len(text) - max_chars
        text = text[:max_chars] + TRUNCATION_MARK.format(dropped=dropped)
    return text


def normalize_content(text: str) -> str:
    """NFKC, lower case, whitespace collapsed, trailing punctuation dropped."""
    text = unicodedata.normalize("NFKC", text).lower()
    return _TRAILING_PUNCTUATION.sub("", " ".join(text.split()))
