"""Whether a bot reply repeats what a person said: how a 撤回 or a delete finds the bot's later
words that still carry a deleted message (``dialogue.forget_store``).

Both texts are compared folded (NFKC, case-folded, only letters, digits and CJK characters
kept), so "银行卡密码：778899" and "你的银行卡密码是 778899" share "银行卡密码". A reply repeats
the text when it holds a run of it worth ``RUN_WEIGHT``: five CJK characters or digits, or ten
Latin letters (a Latin letter says less than a character: "ation" is in half the words of a
sentence). A text worth less than that is repeated only when the reply holds all of it, and a
text worth less than ``MIN_WEIGHT`` (one character, "ok") is never found repeated. Bracketed
placeholders of the deleted text (``[图片]``, ``[表情:笑]``, ``[回复 小明: …]``: what the plugin
writes for pictures, faces and quotes) are not its words and are left out, so withdrawing a
picture never takes a reply that mentions "图片".
"""

from __future__ import annotations

import re
import unicodedata

RUN_WEIGHT = 5.0
MIN_WEIGHT = 2.0
LATIN_WEIGHT = 0.5
_LONGEST_RUN = int(RUN_WEIGHT / LATIN_WEIGHT)  # the most characters a shortest run can need
_SHORTEST_RUN = int(RUN_WEIGHT)  # the fewest (each worth 1)
MAX_FOLDED = 20_000  # longer texts are compared by their start only
_PLACEHOLDER = re.compile(r"\[[^\[\]\n]{1,60}\]")


def fold(text: str) -> str:
    """The text as compared: NFKC, case-folded, letters, digits and CJK characters only."""
    folded = unicodedata.normalize("NFKC", text[: 2 * MAX_FOLDED]).casefold()
    return "".join(c for c in folded if c.isalnum())[:MAX_FOLDED]


def _weight(char: str) -> float:
    return LATIN_WEIGHT if char.isascii() and char.isalpha() else 1.0


def _runs(said: str) -> list[str]:
    """The shortest runs of ``said`` worth ``RUN_WEIGHT``, one starting at each character."""
    runs = []
    for start in range(len(said)):
        worth = 0.0
        for end in range(start, min(len(said), start + _LONGEST_RUN)):
            worth += _weight(said[end])
            if worth >= RUN_WEIGHT:
                runs.append(said[start : end + 1])
                break
    return runs


class Repeats:
    """Tells which replies repeat any of some deleted texts (each folded once)."""

    def __init__(self, texts: list[str]) -> None:
        self._whole: list[str] = []
        self._runs: set[str] = set()
        self._heads: set[str] = set()  # the first SHORTEST characters of every run
        for text in texts:
            said = fold(_PLACEHOLDER.sub(" ", text))
            worth = sum(_weight(c) for c in said)
            if worth < MIN_WEIGHT:
                continue
            if worth < RUN_WEIGHT:
                self._whole.append(said)
            else:
                self._runs.update(_runs(said))
        self._heads = {run[:_SHORTEST_RUN] for run in self._runs}

    def __bool__(self) -> bool:
        return bool(self._whole or self._runs)

    def found_in(self, reply: str) -> bool:
        """Whether ``reply`` repeats one of the texts."""
        folded = fold(reply)
        if any(said in folded for said in self._whole):
            return True
        # One set lookup a character: a run can start only where a run's head does.
        return any(
            folded[start : start + size] in self._runs
            for start in range(len(folded) - _SHORTEST_RUN + 1)
            if folded[start : start + _SHORTEST_RUN] in self._heads
            for size in range(_SHORTEST_RUN, _LONGEST_RUN + 1)
        )


def repeats(reply: str, said: str) -> bool:
    """Whether ``reply`` repeats ``said`` (the rule of the module docstring)."""
    return Repeats([said]).found_in(reply)
