"""What a person is shown when they ask what is remembered about something (``/recall``).

Recall for a prompt always brings its best matches, related or not: the model can ignore a
weak one. A list shown to a person cannot: every line must be about what was asked, or the
answer must say that nothing is. So a turn or fact is listed only when it *mentions* the
query (``mentions``: holds one of its words) or is close to it in meaning (cosine at least
``MemorySettings.recall_floor``, measured per model), and for a question about nothing but a
time (昨天聊了什么) when it was said in that time. The same words said twice are listed once.
The prompt's recall is untouched by any of this.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from ..distill.memory import DistilledHit
from ..lang.keywords import normalize, query_words, terms
from ..lang.timerange import TimeRange, analyse_query
from ..models import MemoryTurn, RecallResult, RecallWindow
from ..settings import MemorySettings
from .options import RecallOptions

if TYPE_CHECKING:
    from ..parts import MemoryParts

# Anchors asked of recall per item listed: most of a weak query's matches fall below the
# floor, and the ones left should still fill the list.
CANDIDATES_PER_ITEM = 4
_T = TypeVar("_T")


@dataclass(frozen=True)
class Relevance:
    """When a found text is about a query: see the module docstring."""

    words: tuple[tuple[str, ...], ...]
    floor: float | None
    span: TimeRange | None = None  # a question about nothing but this time

    @classmethod
    def of(cls, query: str, settings: MemorySettings, now: datetime) -> Relevance:
        """The query's words (less a time expression recall understands) and the floor."""
        when = (
            analyse_query(query, now, settings.tz) if settings.memory_time_understanding else None
        )
        topic = when.rest if when is not None and when.rest.strip() else query
        span = when.range if when is not None and when.time_only else None
        return cls(tuple(query_words(topic)), settings.recall_floor, span)

    def admits(self, text: str, similarity: float | None, said_at: datetime | None = None) -> bool:
        if self.span is not None and said_at is not None and said_at in self.span:
            return True
        if self.floor is not None and similarity is not None and similarity >= self.floor:
            return True
        return mentions(self.words, text)


def mentions(words: Sequence[Sequence[str]], text: str) -> bool:
    """``text`` holds a word of the query (``lang.keywords.query_words``): more than half of
    that word's bigrams, or its lone character, or its letter-and-digit token. Half, not one:
    "潜水艇" is not "去潜水", and "我的猫" is not "我的狗"."""
    if not words:
        return False
    body = normalize(text)
    tokens: set[str] | None = None
    for word in words:
        if word[0][0].isascii():
            tokens = set(terms(text)) if tokens is None else tokens
            found = sum(term in tokens for term in word)
        else:
            found = sum(term in body for term in word)
        if found * 2 > len(word):
            return True
    return False


def same_words(text: str) -> str:
    """The key under which two lines count as the same words (case, width and spacing aside)."""
    return " ".join(normalize(text).split())


@dataclass(frozen=True)
class RecallListing:
    """The relevant part of one recall: ``turns`` (distinct anchors, best first) for the short
    list, or ``windows`` (the relevant windows with their context) for the full view; and the
    relevant distilled ``facts``."""

    query: str
    turns: tuple[MemoryTurn, ...] = ()
    windows: RecallResult | None = None
    facts: tuple[DistilledHit, ...] = ()

    @property
    def empty(self) -> bool:
        found_turns = self.turns or (self.windows is not None and self.windows.windows)
        return not found_turns and not self.facts


async def list_recall(
    parts: MemoryParts,
    user_id: int,
    query: str,
    group_id: int | None,
    *,
    now: datetime,
    items: int,
    full: bool = False,
    skip: Callable[[MemoryTurn], bool] = lambda turn: False,
) -> RecallListing:
    """What to show for ``query`` in this session: at most ``items`` relevant turns (``full``:
    the relevant windows of the prompt's recall instead) and facts. ``skip`` leaves turns out
    whatever they say (the asking message itself, the bot's echoes of it)."""
    relevance = Relevance.of(query, parts.settings, now)
    if full:
        options = RecallOptions(now=now)
    else:
        options = RecallOptions(top_n=items * CANDIDATES_PER_ITEM, window_size=0, now=now)
    result = await parts.retriever.recall(user_id, query, group_id, options)
    windows = [w for w in result.windows if _relevant_window(w, relevance, skip, whole=full)]
    # Shown, not used: a fact's use count ranks it for the prompt.
    facts = await parts.keeper.recall(user_id, group_id, query, now=now, touch=False)
    shown_facts = _distinct(
        [h for h in facts if relevance.admits(h.memory.content, h.similarity)],
        key=lambda h: same_words(h.memory.content),
    )[:items]
    if full:
        kept = tuple(
            dataclasses.replace(w, turns=tuple(t for t in w.turns if not skip(t))) for w in windows
        )
        every = {t.id: t for w in kept for t in w.turns}
        ordered = tuple(sorted(every.values(), key=lambda t: (t.created_at, t.id)))
        view = dataclasses.replace(result, windows=kept, turns=ordered)
        return RecallListing(query=query, windows=view, facts=tuple(shown_facts))
    anchors = [_anchor(w) for w in windows]
    turns = _distinct([t for t in anchors if t is not None], key=lambda t: same_words(t.content))
    return RecallListing(query=query, turns=tuple(turns[:items]), facts=tuple(shown_facts))


def _anchor(window: RecallWindow) -> MemoryTurn | None:
    return next((t for t in window.turns if t.id == window.anchor_id), None)


def _relevant_window(
    window: RecallWindow,
    relevance: Relevance,
    skip: Callable[[MemoryTurn], bool],
    *,
    whole: bool,
) -> bool:
    """Its anchor is relevant; ``whole``: or another of its turns mentions the query (windows
    that overlap were merged under the best anchor, which may be one that is skipped)."""
    anchor = _anchor(window)
    if anchor is not None and not skip(anchor):
        admitted = relevance.admits(anchor.content, window.similarity, anchor.created_at)
        if admitted or not whole:
            return admitted
    elif not whole:
        return False
    return any(relevance.admits(t.content, None, t.created_at) for t in window.turns if not skip(t))


def _distinct(found: Sequence[_T], *, key: Callable[[_T], str]) -> list[_T]:
    """The first of each key, in order."""
    seen: set[str] = set()
    kept = []
    for item in found:
        if key(item) not in seen:
            seen.add(key(item))
            kept.append(item)
    return kept
