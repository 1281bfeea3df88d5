"""The participants a query names: "What did Caroline research?", "小明上次说的那家店".

A participant is a sender name stored on the recalled turns (a group member's card or
nickname, the private user's nickname, the bot's own name on its replies: the text the
console shows). A query that names one asks about that person's turns; the name itself is no
topic word (it matches every turn where one greets the other, or, with the speaker in the
index, half the session), so it leaves the keyword terms (``without_names``) and the
retriever adds lists of that speaker's own turns (``memory_core.recall.retriever``).

Matching is on normalised text (``keywords.normalize``: NFKC, lower case): a name of letters
or digits must stand as a whole word ("Jon" is not in "Jones"); a Chinese name is found
anywhere ("小明上次说的" holds 小明). Names shorter than ``MIN_NAME_CHARS`` are never matched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from .indexed import speaker_label
from .keywords import normalize

# One character ("A", "小") names nobody in a sentence: it is in every other one.
MIN_NAME_CHARS = 2

_WORD_CHAR = re.compile(r"[0-9a-z]")


def name_key(name: str) -> str | None:
    """A sender name as matched: its speaker label, normalised; None when too short."""
    label = speaker_label(name)
    key = normalize(label) if label else ""
    return key if len(key) >= MIN_NAME_CHARS else None


def _spans(text: str, key: str) -> list[tuple[int, int]]:
    """Where ``key`` stands in ``text`` (both normalised), as a whole word at a letter edge."""
    found = []
    start = text.find(key)
    while start >= 0:
        end = start + len(key)
        before_ok = start == 0 or not (
            _WORD_CHAR.match(key[0]) and _WORD_CHAR.match(text[start - 1])
        )
        after_ok = end == len(text) or not (
            _WORD_CHAR.match(key[-1]) and _WORD_CHAR.match(text[end])
        )
        if before_ok and after_ok:
            found.append((start, end))
        start = text.find(key, start + 1)
    return found


def named_speakers(query: str, names: Iterable[str]) -> tuple[str, ...]:
    """The ``names`` (as given, each once) that ``query`` names."""
    text = normalize(query)
    found: dict[str, None] = {}
    for name in names:
        key = name_key(name)
        if key is not None and _spans(text, key):
            found.setdefault(name, None)
    return tuple(found)


# What may stand between a name said to someone and the rest of the message: punctuation; a
# space too after or before a Chinese name ("小诗 你还记得吗"), not an English one ("Caroline
# went", "important to Caroline?": there the name is in the sentence).
_PAUSE = re.compile(r"[,，:：!！~～、]")


def _pause(char: str, key: str) -> bool:
    return _PAUSE.match(char) is not None or (char.isspace() and not key.isascii())


def _vocative(text: str, start: int, end: int) -> bool:
    """Whether the mention at ``start:end`` of ``text`` addresses its bearer: an @-mention,
    or the name opening the message before a pause ("小诗，我上次说的店", "Caroline, what…"),
    or closing it after one ("…叫什么来着，小诗？")."""
    key = text[start:end]
    if start > 0 and text[start - 1] == "@":
        return True
    opening = not text[:start].strip() and (end == len(text) or _pause(text[end], key))
    rest = text[end:].strip(" \t\n?？!！.。~～")
    closing = not rest and start > 0 and _pause(text[start - 1], key)
    return bool(opening or closing)


def asked_about(query: str, names: Iterable[str]) -> tuple[str, ...]:
    """The ``names`` that ``query`` speaks *about* ("小明上次说的那家店", "What did Caroline
    say"): named at least once other than to address them ("小诗，我上次说的店叫什么" speaks
    to 小诗, about the user's own words)."""
    text = normalize(query)
    found: dict[str, None] = {}
    for name in names:
        key = name_key(name)
        if key is None:
            continue
        if any(not _vocative(text, start, end) for start, end in _spans(text, key)):
            found.setdefault(name, None)
    return tuple(found)


def without_names(query: str, names: Sequence[str]) -> str:
    """``query`` with every mention of ``names`` blanked, the rest as written (case kept: it
    is embedded too); the longest name first, so "Caroline Smith" goes whole before
    "Caroline"."""
    keys = sorted({k for n in names if (k := name_key(n)) is not None}, key=len, reverse=True)
    # Matched on the normalised text, cut from the written one: each character's normal form
    # (NFKC may widen one character into several) maps a match back to where it was written.
    pieces = [normalize(c) for c in query]
    owner = [i for i, piece in enumerate(pieces) for _ in piece]
    text = "".join(pieces)
    blanked = [False] * len(query)
    for key in keys:
        for start, end in _spans(text, key):
            if any(blanked[owner[start] : owner[end - 1] + 1]):
                continue  # inside a longer name already blanked
            for i in range(owner[start], owner[end - 1] + 1):
                blanked[i] = True
    kept: list[str] = []
    for i, char in enumerate(query):
        if not blanked[i]:
            kept.append(char)
        elif i == 0 or not blanked[i - 1]:
            kept.append(" ")
    return "".join(kept)
