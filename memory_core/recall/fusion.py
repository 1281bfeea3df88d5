"""Fusion recipes: how the keyword list counts beside the vector list in a hybrid recall.

A recipe is a value (``FusionRecipe``) that travels in ``RecallOptions.fusion``; without one
recall uses ``rrf`` (``retriever.DEFAULT_FUSION``: no other won out of sample). Every recipe
fuses by reciprocal rank (``ranking.fuse_channels``); they differ only in the weight of the
keyword list and of each of its hits beside the vector list. Alone (keyword mode, or a query
that could not be embedded) the keyword ranking stands as it is, whatever the recipe. Each
rule's figures are in ``bench/RESULTS.md``; rules that lost out of sample (``lead``,
``agreement``) were removed, their figures kept there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..dialogue.recall_store import AnchorCandidate, KeywordCandidate
from .ranking import keyword_confidence, keyword_hit_gate, keyword_rarity_weight


@dataclass(frozen=True)
class KeywordEvidence:
    """What a recipe may read about one recall's keyword list beside its vector list."""

    hits: Sequence[KeywordCandidate]
    decayed: Sequence[float]  # each hit's score times its time-decay weight
    near: Sequence[AnchorCandidate]  # the vector list's candidates above the similarity floor
    timed: bool  # the query asks about a time (its turns are the evidence, near or not)


KeywordShare = tuple[float, Mapping[int, float]]
"""The keyword list's weight factor and each hit's strength in [0, 1]."""


def _coverage(evidence: KeywordEvidence) -> dict[int, float]:
    # A hit counts in proportion to how much of the query it matches: a keyword list that
    # only matched filler words ("最近") must not outvote the vector list.
    return {h.id: h.coverage for h in evidence.hits}


def _rrf(evidence: KeywordEvidence) -> KeywordShare:
    return 1.0, _coverage(evidence)


def _confident(evidence: KeywordEvidence) -> KeywordShare:
    # Keywords count as much as their best hit stands out.
    return keyword_confidence(evidence.decayed), _coverage(evidence)


def _rarity(evidence: KeywordEvidence) -> KeywordShare:
    # Keywords count as much as the query's terms are rare in this session (every hit
    # carries the same rarity).
    if not evidence.hits:
        return 1.0, _coverage(evidence)
    return keyword_rarity_weight(evidence.hits[0].rarity), _coverage(evidence)


def _gated(evidence: KeywordEvidence) -> KeywordShare:
    # Each hit counts in full when its terms are rare in this session or meaning agrees with
    # it (near the best vector match). Not in a question about a time: there the turns of
    # that time are the evidence, near in meaning or not (gating them cost the generated
    # set's time questions).
    if not evidence.near or evidence.timed:
        return 1.0, _coverage(evidence)
    best = max(c.similarity for c in evidence.near)
    return 1.0, {
        h.id: h.coverage * keyword_hit_gate(h.similarity, best, h.rarity) for h in evidence.hits
    }


@dataclass(frozen=True)
class FusionRecipe:
    """A named fusion rule: ``keyword_share`` says how much the keyword list and each of its
    hits count beside the vector list."""

    name: str
    keyword_share: Callable[[KeywordEvidence], KeywordShare]


FUSIONS: Mapping[str, FusionRecipe] = {
    recipe.name: recipe
    for recipe in (
        FusionRecipe("rrf", _rrf),  # both lists in full by rank (the default)
        FusionRecipe("confident", _confident),
        FusionRecipe("rarity", _rarity),
        FusionRecipe("gated", _gated),
    )
}
"""Every recipe by name (``RecallOptions.fusion`` takes one)."""
