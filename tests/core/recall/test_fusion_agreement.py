"""MEMORY_FUSION=agreement: when the vector and keyword lists disagree at the top, the more
confident list's first hit comes first; otherwise the fusion is plain ``rrf``."""

from __future__ import annotations

from datetime import datetime, timezone

from memory_core.dialogue.recall_store import AnchorCandidate
from memory_core.recall.options import RecallOptions
from memory_core.recall.ranking import (
    AGREE_DEPTH,
    LEAD_POOL,
    RankedAnchor,
    confident_lead,
    lists_agree,
    put_first,
)
from memory_core.settings import MemorySettings
from tests.core.recall.test_message_outweighs_context import (
    EARLIER,
    MESSAGE,
    NOW,
    RACKET,
    USER,
    stored,
)

AT = datetime(2026, 12, 1, tzinfo=timezone.utc)


def listed(*ids: int) -> list[AnchorCandidate]:
    return [AnchorCandidate(i, AT, 0.5) for i in ids]


FLAT_VECTOR = [0.80 - 0.001 * i for i in range(LEAD_POOL)]  # no hit stands out
CLEAR_VECTOR = [0.95] + [0.80] * (LEAD_POOL - 1)
CLEAR_KEYWORD = [9.0, 1.0, 0.9]  # one turn holds the query's rare terms
FLAT_KEYWORD = [3.0] * LEAD_POOL


def test_lists_agree_when_either_first_is_near_the_others_top() -> None:
    assert AGREE_DEPTH == 3
    assert lists_agree([1, 2, 3], [4, 5, 1])  # the vector list's first, third by keywords
    assert lists_agree([4, 5, 6], [6, 7, 8])  # the keyword list's first, third by meaning
    assert not lists_agree([1, 2, 3], [4, 5, 6, 1])
    assert lists_agree([], [1, 2])


def test_agreeing_lists_keep_the_fused_order() -> None:
    assert confident_lead(listed(1, 2), CLEAR_VECTOR, listed(2, 1), CLEAR_KEYWORD, 1.0) is None


def test_a_keyword_list_that_stands_out_on_rare_terms_leads() -> None:
    vector, keyword = listed(1, 2, 3), listed(7, 8, 9)
    assert confident_lead(vector, FLAT_VECTOR, keyword, CLEAR_KEYWORD, 0.9) == 7
    # The same list on common terms (rarity below 0.7) does not: meaning leads.
    assert confident_lead(vector, FLAT_VECTOR, keyword, CLEAR_KEYWORD, 0.5) == 1


def test_a_vector_list_that_stands_out_leads() -> None:
    vector, keyword = listed(1, 2, 3), listed(7, 8, 9)
    assert confident_lead(vector, CLEAR_VECTOR, keyword, FLAT_KEYWORD, 1.0) == 1


def test_the_lead_goes_first_and_the_rest_keep_their_order() -> None:
    ranked = [RankedAnchor(c, 1.0 - 0.1 * n) for n, c in enumerate(listed(5, 6, 7, 8))]
    moved = put_first(ranked, 7)
    assert [a.candidate.id for a in moved] == [7, 5, 6, 8]
    assert moved[0].score == ranked[0].score
    assert put_first(ranked, 5) == ranked
    assert put_first(ranked, 99) == ranked  # not fused (e.g. outside a time asked about)


def test_the_setting_takes_confidence() -> None:
    assert MemorySettings(memory_fusion="agreement").memory_fusion == "agreement"


# Real PostgreSQL and the bundled model: the lists of the racket case
# (tests/core/recall/test_message_outweighs_context.py) with the message's share by rare terms.


async def test_when_the_lists_disagree_the_more_confident_ones_first_comes_first(  # type: ignore[no-untyped-def]
    memory_factory, local
) -> None:
    first: dict[tuple[str, str], str] = {}
    for fusion in ("rrf", "agreement"):
        memory = await stored(
            memory_factory, local, memory_query_message_weight="rare", memory_fusion=fusion
        )
        for mode in ("vector", "keyword", "hybrid"):
            result = await memory.recall(
                USER,
                MESSAGE,
                options=RecallOptions(
                    top_n=1, window_size=0, now=NOW, mode=mode, context=tuple(EARLIER)
                ),
            )
            first[(fusion, mode)] = result.turns[0].content
    # The lists disagree: meaning finds the racket, keywords the milk-tea queue (the earlier
    # line's 奶茶店 / 排队 count 0.7 each). rrf puts the racket first (it is found by both).
    assert first[("agreement", "vector")] == first[("rrf", "vector")] == RACKET
    keyword_first = first[("rrf", "keyword")]
    assert keyword_first != RACKET and "奶茶" in keyword_first
    assert first[("rrf", "hybrid")] == RACKET
    # In an eight-turn session every matched term is rare and the keyword list's best stands
    # out more than the vector list's: under `agreement` its first leads (the rule's cost).
    assert first[("agreement", "hybrid")] == keyword_first
