"""How much a conversational query's message counts against its earlier lines, per query.

``MEMORY_QUERY_MESSAGE_WEIGHT=auto`` (issue 26 part 3): a fixed share of the message alone
helps when the chat changes topic and costs when the message is elliptic and the earlier
lines are its topic ("the show?"). So the share follows how much the message says on its
own: its keyword words that none of the earlier lines has. The tiers are data (STYLE lesson
29), chosen before they were measured (``bench/RESULTS.md``, "A per-query message share").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..lang.keywords import query_terms, query_words


@dataclass(frozen=True, slots=True)
class MessageShare:
    """The two weights of one conversational query: the message embedded alone in the query
    vector (the rest: the message with its context), and a keyword term only the earlier lines
    have, against 1 for one of the message."""

    message_weight: float
    context_term_weight: float


@dataclass(frozen=True, slots=True)
class ShareTier:
    """From ``own_words`` words of its own up, a message's query has ``share``."""

    own_words: int
    share: MessageShare


# Highest first; the last tier (0 words) catches every message. Below 2 words of its own the
# query is main's context-led one; from 2 it is the pair the `recall` branch measured.
MESSAGE_SHARE_TIERS: tuple[ShareTier, ...] = (
    ShareTier(own_words=2, share=MessageShare(message_weight=0.5, context_term_weight=0.7)),
    ShareTier(own_words=0, share=MessageShare(message_weight=0.0, context_term_weight=1.0)),
)


def own_words(message: str, earlier: Sequence[str]) -> int:
    """How many of ``message``'s keyword words (``query_words``) share no term with any of the
    ``earlier`` lines: what the message says that its context does not."""
    context = {term for line in earlier for term in query_terms(line)}
    return sum(1 for word in query_words(message) if context.isdisjoint(word))


def message_share(
    message: str, earlier: Sequence[str], tiers: Sequence[ShareTier] = MESSAGE_SHARE_TIERS
) -> MessageShare:
    """The weights of the query for ``message`` after ``earlier``: the first of ``tiers``
    (highest first) whose ``own_words`` the message reaches."""
    found = own_words(message, earlier)
    for tier in tiers:
        if found >= tier.own_words:
            return tier.share
    return tiers[-1].share
