"""MEMORY_FUSION=lead: each list counts as much as its best hit stands out, per query."""

from __future__ import annotations

from memory_core.recall.ranking import LEAD_MIN_SHARE, LEAD_POOL, lead_weights, standout


def test_a_lone_keyword_hit_stands_out_and_a_list_of_ties_does_not() -> None:
    assert standout([5.0], LEAD_POOL) > 4  # one turn holds the rare term, the rest none
    assert standout([2.0] * LEAD_POOL, LEAD_POOL) == 0.0
    assert standout([], LEAD_POOL) == 0.0
    # Scale-free: a cosine list and the same shape ten times larger stand out alike.
    cosines = [0.9, 0.8, 0.79, 0.78, 0.77]
    assert abs(standout(cosines, 5) - standout([10 * c for c in cosines], 5)) < 1e-9


def test_the_list_whose_best_hit_stands_out_gets_the_larger_weight() -> None:
    flat_vector = [0.80 + 0.001 * i for i in range(LEAD_POOL)]
    clear_keyword = [9.0, 2.0, 1.9]
    vector, keyword = lead_weights(flat_vector, clear_keyword)
    assert keyword > vector and abs(vector + keyword - 2.0) < 1e-9
    clear_vector = [0.95] + [0.80] * (LEAD_POOL - 1)
    tied_keyword = [3.0] * LEAD_POOL
    vector, keyword = lead_weights(clear_vector, tied_keyword)
    # A list that does not stand out at all still keeps its floor share.
    assert abs(keyword - 2.0 * LEAD_MIN_SHARE) < 1e-9 and abs(vector + keyword - 2.0) < 1e-9
    assert lead_weights([0.5] * 3, [1.0] * 3) == (1.0, 1.0)
