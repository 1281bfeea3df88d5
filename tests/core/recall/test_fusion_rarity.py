"""The ``rarity`` fusion recipe (not the default): beside the vector list, the keyword list
counts as much as the query's rarest found terms are rare in the session."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

from memory_core.dialogue.recall_store import PgRecallStore, RecallScope
from memory_core.models import TurnInput, generate_session_key
from memory_core.recall.fusion import FUSIONS
from memory_core.recall.options import RecallOptions
from memory_core.recall.ranking import RARITY_FULL, RARITY_NONE, keyword_rarity_weight

SH = timezone(timedelta(hours=8))
NOW = datetime(2024, 1, 15, 10, 0, tzinfo=SH)
# A chatty session: "今天" and "天气" are in nearly every turn, "火锅" in one.
CHAT = [
    f"今天天气{weather}，{plan}"
    for weather in ("不错", "很好", "一般", "真热")
    for plan in (
        "在家看书",
        "出门散步",
        "去公园跑步",
        "和朋友打球",
        "在家做饭",
    )
] + ["周末去吃了那家火锅"]


def said(text: str, minutes_ago: int, user: int = 1) -> TurnInput:
    return TurnInput(
        user_id=user, role="user", content=text, created_at=NOW - timedelta(minutes=minutes_ago)
    )


def test_the_keyword_list_counts_nothing_for_common_terms_and_in_full_for_a_unique_one():
    assert keyword_rarity_weight(0.0) == 0.0
    assert keyword_rarity_weight(RARITY_NONE) == 0.0
    assert keyword_rarity_weight((RARITY_NONE + RARITY_FULL) / 2) == pytest.approx(0.5)
    assert keyword_rarity_weight(RARITY_FULL) == 1.0


async def test_the_store_tells_how_rare_the_querys_terms_are_in_this_session_only(
    memory_factory,
):
    memory = await memory_factory()
    turns = [said(text, 100 - i) for i, text in enumerate(CHAT)]
    # Another user's session says "火锅" everywhere: it must not make it common in this one.
    turns += [said(f"火锅真好吃 {i}", 50, user=2) for i in range(30)]
    await memory.parts.writer.add_dialogues(turns)
    store = memory.parts.database.store(PgRecallStore)
    scope = RecallScope(generate_session_key(1, None), None)
    search = dict(
        scope=scope, model=memory.parts.embedder.model, now=NOW, limit=40, session_rows=len(CHAT)
    )

    common = await store.keyword_candidates(terms=["今天", "天气"], **search)
    rare = await store.keyword_candidates(terms=["今天", "火锅"], **search)

    # ln(N / df) / ln(N) of each found term, the (up to) three rarest averaged.
    everywhere = math.log(len(CHAT) / (len(CHAT) - 1)) / math.log(len(CHAT))
    assert len(common) == len(CHAT) - 1
    assert all(hit.rarity == pytest.approx(everywhere) for hit in common)
    assert all(hit.rarity == pytest.approx((everywhere + 1.0) / 2) for hit in rare)


async def test_rarity_fusion_leaves_the_vector_order_alone_when_the_query_words_are_common(
    memory_factory,
):
    query = "天气很热，在家吧"
    orders = {}
    for fusion in ("rrf", "rarity"):
        memory = await memory_factory()
        if fusion == "rrf":
            await memory.parts.writer.add_dialogues(
                [said(text, 100 - i) for i, text in enumerate(CHAT)]
            )
        for mode in ("vector", "hybrid"):
            result = await memory.parts.retriever.recall(
                1,
                query,
                options=RecallOptions(
                    top_n=5, window_size=0, now=NOW, mode=mode, fusion=FUSIONS[fusion]
                ),
            )
            orders[fusion, mode] = [w.anchor_id for w in result.windows]
    # The test can fail: plain RRF lets the common words reorder the vector list.
    assert orders["rrf", "hybrid"] != orders["rrf", "vector"]
    assert orders["rarity", "hybrid"] == orders["rarity", "vector"]


async def test_a_fusion_recipe_given_in_the_options_wins_over_the_default(memory_factory):
    # The recipe travels with the recall: the same memory recalls as ``rarity`` when the
    # options name it, and as ``rrf`` (the default) otherwise.
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues([said(text, 100 - i) for i, text in enumerate(CHAT)])
    query = "天气很热，在家吧"

    async def order(**options: object) -> list[int]:
        asked = RecallOptions(top_n=5, window_size=0, now=NOW, **options)  # type: ignore[arg-type]
        return [
            w.anchor_id
            for w in (await memory.parts.retriever.recall(1, query, options=asked)).windows
        ]

    vector = await order(mode="vector")
    assert await order(mode="hybrid") != vector  # rrf: the common words reorder it
    assert await order(mode="hybrid", fusion=FUSIONS["rarity"]) == vector
