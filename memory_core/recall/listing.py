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
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

from ..context.block import repeated_turns
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
# Facts listed beside the prompt's lines (``/recall``'s five).
FACTS = 5
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
        when = analyse_query(query, now, settings.tz)
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
    words: tuple[tuple[str, ...], ...] = ()  # the query's words (``Relevance.words``)

    def excerpt(self, text: str, chars: int) -> str:
        """``text`` cut to about ``chars`` characters around the query's words (``excerpt``)."""
        return excerpt(text, self.words, chars)

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
    items: int | None = None,
    full: bool = False,
    skip: Callable[[MemoryTurn], bool] = lambda turn: False,
    max_tokens: int | None = None,
) -> RecallListing:
    """What to show for ``query`` in this session, and its relevant facts (at most ``items``,
    else ``FACTS``).

    ``items=None`` (``/recall``'s and MCP ``recall``'s default): the dialogue lines the bot's
    prompt would carry for ``query`` (``prompt_lines``), or nothing when none of its windows is
    about the query: the lines the prompt's memory block keeps once fitted to the memory budget
    (``max_tokens``, else MEMORY_MAX_TOKENS; the context builder's fit, facts and all, so a
    small budget lists what the prompt carries, not what recall found). ``items``: at most
    that many relevant anchors alone. ``full``: the relevant windows of the prompt's recall.
    ``skip`` leaves turns out whatever they say (the asking message itself, the bot's answers
    to /recall)."""
    relevance = Relevance.of(query, parts.settings, now)
    prompt = items is None or full
    if prompt:
        options = RecallOptions(now=now)
    else:
        assert items is not None
        options = RecallOptions(top_n=items * CANDIDATES_PER_ITEM, window_size=0, now=now)
    result = await parts.retriever.recall(user_id, query, group_id, options)
    windows = [w for w in result.windows if _relevant_window(w, relevance, skip, whole=prompt)]
    # Shown, not used: a fact's use count ranks it for the prompt.
    facts = await parts.keeper.recall(user_id, group_id, query, now=now, touch=False)
    shown_facts = _distinct(
        [h for h in facts if relevance.admits(h.memory.content, h.similarity)],
        key=lambda h: same_words(h.memory.content),
    )[: FACTS if items is None else items]
    if not full and items is None:
        lines: tuple[MemoryTurn, ...] = ()
        if windows:
            # One path with the prompt: the same builder fits the same recall in the same
            # budget, and only the lines its block keeps are listed.
            context = await parts.context_builder.build(
                user_id, group_id, query, now=now, recall=result, max_tokens=max_tokens,
                touch=False,
            )  # fmt: skip
            fitted = set(context.turn_ids)
            lines = tuple(t for t in prompt_lines(result, skip) if t.id in fitted)
        return RecallListing(
            query=query, turns=lines, facts=tuple(shown_facts), words=relevance.words
        )
    if full:
        kept = tuple(
            dataclasses.replace(w, turns=tuple(t for t in w.turns if not skip(t))) for w in windows
        )
        every = {t.id: t for w in kept for t in w.turns}
        ordered = tuple(sorted(every.values(), key=lambda t: (t.created_at, t.id)))
        view = dataclasses.replace(result, windows=kept, turns=ordered)
        return RecallListing(
            query=query, windows=view, facts=tuple(shown_facts), words=relevance.words
        )
    anchors = [_anchor(w) for w in windows]
    turns = _distinct([t for t in anchors if t is not None], key=lambda t: same_words(t.content))
    return RecallListing(
        query=query, turns=tuple(turns[:items]), facts=tuple(shown_facts), words=relevance.words
    )


def prompt_lines(
    result: RecallResult, skip: Callable[[MemoryTurn], bool] = lambda turn: False
) -> tuple[MemoryTurn, ...]:
    """The dialogue lines the prompt's block carries from ``result`` (the prompt's recall),
    best window first, each window's anchor first and its other turns in time order: every
    turn once, less the ones that only repeat another (``context.block.repeated_turns``: the
    bot's echo of a statement) and the ``skip``ped. Before the block's token fit these are the
    prompt's lines, so what a person or an agent is shown is what the model sees; the anchors'
    order keeps a statement before a question about it (``recall.statements``); ``list_recall``
    keeps the ones the block's token fit leaves in."""
    gone = repeated_turns(result.windows)
    seen: set[int] = set()
    lines = []
    for window in result.windows:
        for turn in sorted(window.turns, key=lambda t: t.id != window.anchor_id):
            if turn.id in seen or turn.id in gone or skip(turn):
                continue
            seen.add(turn.id)
            lines.append(turn)
    return tuple(lines)


def relevant_windows(
    windows: Sequence[RecallWindow], relevance: Relevance
) -> tuple[RecallWindow, ...]:
    """The windows ``--full`` would keep: the anchor is about the query, or another of their
    turns mentions it (the chat model's ``search_memory`` lists no more than that)."""
    return tuple(w for w in windows if _relevant_window(w, relevance, _never, whole=True))


def _never(turn: MemoryTurn) -> bool:
    return False


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


# A run a cut must not split: letters and digits, joined by the separators of a code or an
# id ("4-2-1187", "ORD-123456", "a.b@c.com").
_RUN = re.compile(r"[0-9A-Za-z]+(?:[-_.:/#@+][0-9A-Za-z]+)*")
NEAR = 3  # characters between a match and a run that is its value ("取件码是 4-2-1187")


def excerpt(text: str, words: Sequence[Sequence[str]], chars: int) -> str:
    """``text`` on one line, cut to about ``chars`` characters (``…`` where cut) around the
    place that holds the most of the query's ``words`` (their terms, ``lang.keywords``), so
    what follows a matched word — the digits of "取件码 4-2-1187" — is shown, not the line's
    start. A letter-and-digit run is never split (the window grows to hold it, unless the run
    alone is longer than ``chars``); without a match, the start of the line."""
    text = " ".join(text.split())
    if chars <= 2 or len(text) <= chars:
        return text
    spans = _matched_spans(text, [term for word in words for term in word])
    room = chars - 2  # an ellipsis either side
    start = _best_start(spans, len(text), room)
    end = start + room
    if start == 0:  # no ellipsis before: its room goes to the end
        end += 1
    elif end >= len(text):
        start -= 1
    for run in _RUN.finditer(text):
        if run.end() - run.start() > room:
            continue
        # A run cut by the window: the window grows to hold it when it touches a match (the
        # value of what was asked: "取件码4-2-1187"), else it stops short of it.
        near = any(s - NEAR <= run.end() and run.start() <= e + NEAR for s, e in spans)
        if run.start() < start < run.end():
            start = run.start() if near else run.end()
        if run.start() < end < run.end():
            end = run.end() if near else run.start()
    head = "…" if start > 0 else ""
    tail = "…" if end < len(text) else ""
    return head + text[start:end] + tail


def _matched_spans(text: str, found_terms: Sequence[str]) -> list[tuple[int, int]]:
    """Where each term occurs in ``text`` (normalised a character at a time, so the offsets
    are the text's own)."""
    index: list[int] = []  # position in the normalised text -> position in ``text``
    folded = []
    for position, char in enumerate(text):
        part = normalize(char)
        folded.append(part)
        index.extend([position] * len(part))
    body = "".join(folded)
    spans = []
    for term in found_terms:
        at = body.find(term)
        while at >= 0:
            spans.append((index[at], index[at + len(term) - 1] + 1))
            at = body.find(term, at + 1)
    return spans


def _best_start(spans: Sequence[tuple[int, int]], length: int, chars: int) -> int:
    """The start of the ``chars`` window holding the most matched characters, each span tried
    at the window's centre; the earliest on a tie, 0 without spans."""
    best, best_start = 0, 0
    for span_start, span_end in spans:
        start = max(0, min(length - chars, (span_start + span_end - chars) // 2))
        held = sum(
            min(e, start + chars) - max(s, start)
            for s, e in spans
            if s < start + chars and e > start
        )
        if held > best or (held == best and start < best_start):
            best, best_start = held, start
    return best_start
