"""A plain Okapi BM25, the reference a public set's figures are read beside.

Nothing of the bot's is used: a lower-case English tokenizer (runs of letters and digits; an
apostrophe's tail, as in "Caroline's", is its own token), no stemming, no stop words, and the
textbook scoring with k1 = 1.2, b = 0.75 and the non-negative idf
``ln(1 + (N - n + 0.5) / (n + 0.5))``. If the bot's keyword channel ranks below this on the
same turns, the loss is in the bot, not in the set.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

K1 = 1.2
B = 0.75
_TOKEN = re.compile(r"[a-z0-9]+")
_HAN = re.compile(r"[\u4e00-\u9fff]+")


def tokens(text: str) -> list[str]:
    """The text's lower-case runs of ASCII letters and digits, and the character bigrams of
    its runs of Chinese characters (a lone character as itself): the plain lexical baseline
    of Chinese retrieval, which needs no word segmenter."""
    lowered = text.lower()
    found = _TOKEN.findall(lowered)
    for run in _HAN.findall(lowered):
        found += [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
    return found


class BM25:
    """One corpus's index: ``ranked(query)`` orders its documents by Okapi BM25."""

    def __init__(self, documents: Sequence[str], k1: float = K1, b: float = B) -> None:
        self.k1 = k1
        self.b = b
        self._counts = [Counter(tokens(d)) for d in documents]
        self._lengths = [sum(c.values()) for c in self._counts]
        self._average = sum(self._lengths) / len(self._lengths) if self._lengths else 0.0
        frequency: Counter[str] = Counter()
        for counts in self._counts:
            frequency.update(counts.keys())
        total = len(self._counts)
        self._idf = {t: math.log(1 + (total - n + 0.5) / (n + 0.5)) for t, n in frequency.items()}

    def scores(self, query: str) -> list[float]:
        """Every document's score for the query (a repeated query term counts once a repeat)."""
        terms = [t for t in tokens(query) if t in self._idf]
        out = []
        for counts, length in zip(self._counts, self._lengths, strict=True):
            norm = self.k1 * (1 - self.b + self.b * length / self._average) if self._average else 0
            score = 0.0
            for term in terms:
                tf = counts.get(term, 0)
                if tf:
                    score += self._idf[term] * tf * (self.k1 + 1) / (tf + norm)
            out.append(score)
        return out

    def ranked(self, query: str) -> list[int]:
        """The indices of the documents that match any query term, best first (ties: the
        earlier document first)."""
        scored = self.scores(query)
        return sorted((i for i, s in enumerate(scored) if s > 0), key=lambda i: (-scored[i], i))
