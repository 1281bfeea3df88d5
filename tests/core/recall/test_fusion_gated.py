"""The ``gated`` fusion recipe (not the default): beside the vector list, a keyword hit counts
in full when the query's terms are rare in the session or the hit is about as close in meaning
as the best vector match, and a quarter when it is neither."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from memory_core.dialogue.recall_store import AnchorCandidate
from memory_core.models import TurnInput
from memory_core.recall.fusion import FUSIONS
from memory_core.recall.options import RecallOptions
from memory_core.recall.ranking import (
    FAR_HIT_SHARE,
    NEAR_MATCH_GAP,
    RARITY_FULL,
    RARITY_NONE,
    Channel,
    fuse_channels,
    keyword_hit_gate,
)
from tests.fakes import HashingEmbedder

SH = timezone(timedelta(hours=8))
NOW = datetime(2024, 1, 15, 10, 0, tzinfo=SH)
COMMON = RARITY_NONE  # the query's rarest found terms are everyday words of the session


def candidate(turn_id: int, similarity: float) -> AnchorCandidate:
    return AnchorCandidate(turn_id, NOW - timedelta(hours=turn_id), similarity)


def test_a_hit_level_with_the_best_match_counts_in_full_and_a_far_one_a_quarter():
    assert keyword_hit_gate(0.85, 0.85, COMMON) == 1.0
    assert keyword_hit_gate(0.86, 0.85, COMMON) == 1.0  # closer than the vector list's best
    assert keyword_hit_gate(0.85 - NEAR_MATCH_GAP / 2, 0.85, COMMON) == pytest.approx(
        (1.0 + FAR_HIT_SHARE) / 2
    )
    assert keyword_hit_gate(0.85 - NEAR_MATCH_GAP, 0.85, COMMON) == pytest.approx(FAR_HIT_SHARE)
    assert keyword_hit_gate(0.40, 0.85, COMMON) == FAR_HIT_SHARE


def test_a_far_hit_counts_in_full_when_the_querys_terms_are_rare_in_the_session():
    assert keyword_hit_gate(0.40, 0.85, RARITY_FULL) == 1.0
    halfway = (RARITY_NONE + RARITY_FULL) / 2
    assert keyword_hit_gate(0.40, 0.85, halfway) == pytest.approx(0.5)


def test_a_hit_without_a_cosine_counts_as_far():
    assert keyword_hit_gate(None, 0.85, COMMON) == FAR_HIT_SHARE
    assert keyword_hit_gate(None, 0.85, RARITY_FULL) == 1.0


def fused_first(step: float, rarity: float) -> int:
    """Ten vector candidates, turn 1 first (cosine 0.86), each next one ``step`` lower; the
    keyword list found only turn 10, the vector list's last, matching 30 % of the query."""
    vector = [candidate(i, 0.86 - step * (i - 1)) for i in range(1, 11)]
    keyword = [vector[-1]]
    best = max(c.similarity for c in vector)
    strengths = {c.id: 0.3 * keyword_hit_gate(c.similarity, best, rarity) for c in keyword}
    ranked = fuse_channels(
        [Channel("vector", vector), Channel("keyword", keyword, strengths=strengths)]
    )
    return ranked[0].candidate.id


def test_a_far_common_word_hit_does_not_take_the_vector_lists_first_place():
    # Turn 10 is 0.045 below the best match. Counted in full (as plain RRF counts it, and as
    # gated counts rare terms) it wins: 1/70 + 0.3/61 > 1/61.
    assert fused_first(step=0.005, rarity=RARITY_FULL) == 10
    assert fused_first(step=0.005, rarity=COMMON) == 1


def test_a_keyword_hit_near_the_best_match_still_moves_up_on_common_words():
    # Turn 10 is 0.009 below the best match: it counts more than half.
    assert fused_first(step=0.001, rarity=COMMON) == 10


def said(text: str, minutes_ago: int, user: int) -> TurnInput:
    return TurnInput(
        user_id=user, role="user", content=text, created_at=NOW - timedelta(minutes=minutes_ago)
    )


async def test_gated_hybrid_recall_stays_in_the_asking_session(memory_factory):
    memory = await memory_factory()
    mine = [said(f"今天天气{w}，在家做饭", 100 - i, user=1) for i, w in enumerate("好热冷闷")]
    # Another user's session says the query's rare word and is the closer match by far.
    others = [said("周末去吃了那家火锅，天气很热", 50, user=2) for _ in range(5)]
    await memory.parts.writer.add_dialogues(mine + others)
    for mode in ("hybrid", "keyword", "vector"):
        result = await memory.parts.retriever.recall(
            1,
            "那家火锅天气很热",
            options=RecallOptions(
                top_n=10, window_size=0, now=NOW, mode=mode, fusion=FUSIONS["gated"]
            ),
        )
        assert result.turns, mode
        assert {t.user_id for t in result.turns} == {1}, mode


class MeaningByTable(HashingEmbedder):
    """Texts of the table get the vector it gives (the query is axis 0, each text its own
    other axis at the given cosine to it): the test decides what is close in meaning."""

    def __init__(self, cosines: dict[str, float], query: str) -> None:
        super().__init__()
        self.table = {query: np.eye(self.dim, dtype=np.float32)[0]}
        for axis, (text, cosine) in enumerate(cosines.items(), start=1):
            vector = np.zeros(self.dim, dtype=np.float32)
            vector[0], vector[axis] = cosine, math.sqrt(1.0 - cosine * cosine)
            self.table[text] = vector

    def _vector(self, text: str) -> np.ndarray:
        return self.table[text] if text in self.table else super()._vector(text)


CAT, BARE = "weather or not, the cat is sick", "weather!"
# Cosines to the query "weather": the cat turn is what it means, "weather!" is far in meaning,
# the topic turns fill the vector list, the weather chat is far from everything.
WEATHER_SESSION = {CAT: 1.0, BARE: 0.49}
WEATHER_SESSION |= {f"topic {i}": 0.48 - 0.01 * i for i in range(18)}
WEATHER_SESSION |= {f"weather chat {i}": 0.0 for i in range(10)}


async def test_gated_recall_ranks_the_meaning_match_above_a_far_common_word_hit(memory_factory):
    # "weather" is in 12 of the session's 30 turns (a chat word here); "weather!" is the
    # keyword list's first hit.
    firsts = await first_by_fusion(memory_factory, WEATHER_SESSION, query="weather")
    # The test can fail: plain RRF puts the far hit first (found by both lists, high in each).
    assert firsts == {"rrf": BARE, "gated": CAT}


async def test_a_question_about_a_time_fuses_as_plain_rrf(memory_factory):
    # The same session said yesterday, asked about yesterday: the turns of that day are the
    # evidence, near in meaning or not, so gated fuses as RRF does.
    firsts = await first_by_fusion(
        memory_factory, WEATHER_SESSION, query="yesterday weather weather", said_minutes_ago=24 * 60
    )
    assert firsts["gated"] == firsts["rrf"]


async def first_by_fusion(
    memory_factory, cosines: dict[str, float], query: str, said_minutes_ago: int = 0
) -> dict[str, str]:
    """The first turn hybrid recall returns for ``query`` under each fusion, the texts of
    ``cosines`` said in that order a minute apart (vectors as the table says)."""
    embedder = MeaningByTable(cosines, query=query.removeprefix("yesterday "))
    firsts = {}
    for fusion in ("rrf", "gated"):
        memory = await memory_factory(embedder=embedder)
        if fusion == "rrf":
            turns = [said(t, said_minutes_ago + 60 - i, 1) for i, t in enumerate(cosines)]
            await memory.parts.writer.add_dialogues(turns)
        options = RecallOptions(
            top_n=5, window_size=0, now=NOW, mode="hybrid", fusion=FUSIONS[fusion]
        )
        result = await memory.parts.retriever.recall(1, query, options=options)
        firsts[fusion] = next(
            t.content for t in result.turns if t.id == result.windows[0].anchor_id
        )
    return firsts
