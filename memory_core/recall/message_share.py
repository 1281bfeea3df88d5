"""How much a conversational query's message counts against its earlier lines, per query.

``MEMORY_QUERY_MESSAGE_WEIGHT=auto`` (issue 26 part 3): a fixed share of the message alone
helps when the chat changes topic and costs when the message is elliptic and the earlier
lines are its topic ("the show?"). So the share follows how much the message says on its
own: its keyword words that none of the earlier lines has. The tiers are data (STYLE lesson
29), chosen before they were measured (``bench/RESULTS.md``, "A per-query message share").

``rare`` (branch ``fusion``): the same tiers, counting the message's own terms that are *rare
in the session* (said in a few of the user's stored turns) rather than its words absent from
the two earlier lines: a message's share is earned by what points at a memory.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
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
    """From ``own_words`` words (or, for ``rare_share``, rare terms) of its own up, a message's
    query has ``share``."""

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


# ``MEMORY_QUERY_MESSAGE_WEIGHT=rare``: a term is rare in a session of N turns when it is in at
# least one of them and in at most N ** (1 - RARE_TERM_RARITY) (rarity ln(N/df) / ln N of at
# least this, the bound of ``MEMORY_FUSION=rarity``: e.g. at most 7 of 1,000 turns). Written
# down with the tiers before they were run (bench/RESULTS.md, "A per-query confidence fusion").
RARE_TERM_RARITY = 0.7

# Highest first, as ``MESSAGE_SHARE_TIERS`` but counting the message's own *rare* terms.
RARE_SHARE_TIERS: tuple[ShareTier, ...] = (
    ShareTier(own_words=2, share=MessageShare(message_weight=0.5, context_term_weight=0.7)),
    ShareTier(own_words=0, share=MessageShare(message_weight=0.0, context_term_weight=1.0)),
)


def own_terms(message: str, earlier: Sequence[str]) -> list[str]:
    """``message``'s keyword terms (``query_terms``) that none of the ``earlier`` lines has."""
    context = {term for line in earlier for term in query_terms(line)}
    return [term for term in query_terms(message) if term not in context]


def is_rare(frequency: int, turns: int, most: int = 0) -> bool:
    """Whether a term in ``frequency`` of a session's ``turns`` turns is rare there: said at
    least once, and in few of them: at most ``most`` turns, or with ``most=0`` at most
    ``turns ** (1 - RARE_TERM_RARITY)``. A term never said is no evidence of a memory; a
    common one ("今天", "haha") says nothing of which one."""
    if frequency < 1:
        return False
    if most > 0:
        return frequency <= most
    if turns <= 1:
        return True
    return math.log(turns / frequency) / math.log(turns) >= RARE_TERM_RARITY


def rare_share(
    terms: Sequence[str],
    frequencies: Mapping[str, int],
    turns: int,
    tiers: Sequence[ShareTier] = RARE_SHARE_TIERS,
    most: int = 0,
) -> MessageShare:
    """The weights of the query whose message has ``terms`` of its own (``own_terms``), their
    document frequencies in the session of ``turns`` turns given: the first of ``tiers``
    (highest first) whose count the message's rare terms reach (``is_rare`` with ``most``)."""
    found = sum(1 for term in terms if is_rare(frequencies.get(term, 0), turns, most))
    for tier in tiers:
        if found >= tier.own_words:
            return tier.share
    return tiers[-1].share
