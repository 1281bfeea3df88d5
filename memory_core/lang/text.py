"""Making arbitrary user text safe to store, embed and count."""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any

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


# Deeper than any real OneBot message (a forwarded chat inside a forwarded chat is about ten
# levels); deeper data would exhaust the recursion here or in the JSON encoder.
JSON_DEPTH_LIMIT = 64
JSON_TOO_DEEP = "[嵌套过深，已省略]"


def scrub_json(value: object, _depth: int = 0) -> Any:
    """``value`` as plain JSON data (dicts, lists, str, int, finite float, bool, None) whose every
    string, keys included, went through :func:`scrub`; any other leaf, and a NaN or infinite
    float (JSON has none), becomes its scrubbed ``str``. A container nested deeper than
    ``JSON_DEPTH_LIMIT`` becomes the placeholder ``JSON_TOO_DEEP``."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (dict, list, tuple)) and _depth >= JSON_DEPTH_LIMIT:
        return JSON_TOO_DEEP
    if isinstance(value, dict):
        return {scrub(str(key)): scrub_json(item, _depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_json(item, _depth + 1) for item in value]
    return scrub(str(value))


def clean_content(text: object, max_chars: int) -> str:
    """Return storable content from text already scrubbed (:func:`scrub`), or raise
    ``InvalidTurnError`` for non-text or blank text.

    Text longer than ``max_chars`` is cut with a visible mark saying how much was dropped, so
    nothing is cut silently.
    """
    if not isinstance(text, str):
        raise InvalidTurnError(f"content must be text, got {type(text).__name__}")
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
