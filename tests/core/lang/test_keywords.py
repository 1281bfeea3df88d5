"""The keyword channel: terms made in Python, stored as a tsvector, searched per session."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import asyncpg

from memory_core.lang.keywords import (
    ANALYZER_VERSION,
    MAX_DOCUMENT_TERMS,
    MAX_QUERY_TERMS,
    conversation_terms,
    document_terms,
    query_terms,
    tsquery_any,
)
from memory_core.models import TurnInput
from memory_core.recall.options import RecallOptions

T0 = datetime(2024, 1, 16, 10, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(days=1)


def said(text: str, minutes: float, user: int = 1, group: int | None = None) -> TurnInput:
    return TurnInput(
        user_id=user,
        group_id=group,
        role="user",
        content=text,
        created_at=T0 + timedelta(minutes=minutes),
    )


def test_ids_numbers_and_english_names_inside_chinese_become_their_own_terms():
    terms = document_terms("我的订单号是ORD123456，Alice说明天到，一共3件")
    assert {"ord123456", "ord", "123456", "alice", "3", "订单", "单号"} <= set(terms)
    hyphenated = document_terms("单号 ORD-2024-0042")
    assert {"ord-2024-0042", "ord20240042", "2024", "0042"} <= set(hyphenated)


def test_full_width_text_matches_its_ascii_form():
    assert set(document_terms("ＯＲＤ１２３４５６")) == set(document_terms("ord123456"))


def test_query_drops_question_words_but_keeps_names():
    terms = query_terms("小明说的那个餐厅叫什么名字？")
    assert "小明" in terms and "餐厅" in terms
    assert "什么" not in terms and "那个" not in terms


def test_a_huge_message_gives_a_bounded_number_of_terms():
    text = "".join(chr(0x4E00 + i) for i in range(20_000))
    assert len(document_terms(text)) == MAX_DOCUMENT_TERMS


def test_tsquery_literal_quotes_every_term():
    assert tsquery_any(["o'neil", "a\\b"]) == "'o''neil' | 'a\\\\b'"
    assert tsquery_any([]) is None


async def test_keyword_recall_finds_names_numbers_and_order_ids_in_chinese_sentences(
    memory_factory,
):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues(
        [
            said("小明说他下周三要去上海出差", 0),
            said("我的订单号是ORD123456，昨天下单的", 1),
            said("今天跑了12公里，累死了", 2),
            said("Alice推荐的那本书叫三体", 3),
            said("订单还没到，有点着急", 4),
            said("上海的天气不错", 5),
            said("今天跑了一会儿步", 6),
        ]
    )

    async def anchors(query: str) -> list[str]:
        result = await memory.parts.retriever.recall(
            1, query, options=RecallOptions(top_n=1, window_size=0, mode="keyword", now=NOW)
        )
        return [t.content for t in result.turns]

    assert await anchors("小明去哪出差") == ["小明说他下周三要去上海出差"]
    assert await anchors("ORD123456") == ["我的订单号是ORD123456，昨天下单的"]
    assert await anchors("单号123456到哪了") == ["我的订单号是ORD123456，昨天下单的"]
    assert await anchors("我跑了12公里吗") == ["今天跑了12公里，累死了"]
    assert await anchors("alice推荐了什么书") == ["Alice推荐的那本书叫三体"]


async def test_bulk_and_single_inserts_both_store_keywords(memory_factory, fresh_dsn):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues([said("批量导入的第一条 ORD1", 0)])
    await memory.parts.writer.add_turn(said("单条写入的 ORD2", 1))
    conn = await asyncpg.connect(fresh_dsn)
    try:
        rows = await conn.fetch(
            "SELECT content, tsvector_to_array(keywords) AS terms FROM dialogues ORDER BY id"
        )
    finally:
        await conn.close()
    assert "ord1" in rows[0]["terms"] and "批量" in rows[0]["terms"]
    assert "ord2" in rows[1]["terms"] and "单条" in rows[1]["terms"]


async def test_rows_without_keywords_are_backfilled_and_then_found(memory_factory, fresh_dsn):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogues([said(f"第{i}条消息 ORD{i:06d}", i) for i in range(30)])
    conn = await asyncpg.connect(fresh_dsn)
    try:
        # As if stored before migration 003.
        await conn.execute("UPDATE dialogues SET keywords = NULL")
        assert (
            await memory.parts.retriever.recall(
                1, "ORD000007", options=RecallOptions(mode="keyword", now=NOW)
            )
            is not None
        )
        assert (
            await memory.parts.retriever.recall(
                1, "ORD000007", options=RecallOptions(mode="keyword", now=NOW)
            )
        ).turns == ()
        assert await memory.parts.upkeep.backfill_keywords(batch_size=7) == 30
        assert await conn.fetchval("SELECT count(*) FROM dialogues WHERE keywords IS NULL") == 0
    finally:
        await conn.close()
    result = await memory.parts.retriever.recall(
        1, "ORD000007", options=RecallOptions(top_n=1, window_size=0, mode="keyword", now=NOW)
    )
    assert [t.content for t in result.turns] == ["第7条消息 ORD000007"]


async def test_a_changed_analyser_version_marks_every_row_for_the_backfill(
    memory_factory, fresh_dsn
):
    first = await memory_factory()
    await first.parts.writer.add_dialogues([said("记住这个号码 ORD42", 0)])
    await first.aclose()
    conn = await asyncpg.connect(fresh_dsn)
    try:
        stored = await conn.fetchval("SELECT value FROM memory_meta WHERE key = 'keyword_analyzer'")
        assert stored == ANALYZER_VERSION
        await conn.execute("UPDATE memory_meta SET value = 'old' WHERE key = 'keyword_analyzer'")
        again = await memory_factory()
        assert await conn.fetchval("SELECT count(*) FROM dialogues WHERE keywords IS NULL") == 1
        assert await again.parts.upkeep.backfill_keywords() == 1
    finally:
        await conn.close()


def test_conversation_terms_take_the_message_then_the_lines_nearest_it():
    earlier = [f"订单{i}号" for i in range(100, 200)] + ["学校门口那家面馆"]
    found = conversation_terms("那家店叫什么来着", earlier)
    assert found[:4] == query_terms("那家店叫什么来着")
    assert "面馆" in found and "199" in found  # the lines just before the message
    assert "100" not in found  # the oldest lines fall past the limit
    assert len(found) == MAX_QUERY_TERMS
