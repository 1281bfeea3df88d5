"""Who said it is part of what a turn is searched by (MEMORY_INDEX_SPEAKER, migration 007),
and rows indexed in another text form are re-indexed by themselves or by ``reembed``."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import asyncpg
import pytest

from memory_core import open_memory
from memory_core.dialogue.upkeep import TEXT_FORM_META
from memory_core.lang.indexed import CONTENT_ONLY, WITH_SPEAKER, indexed_text
from memory_core.models import TurnInput
from memory_core.recall.options import RecallOptions
from memory_core.settings import MemorySettings
from tests.fakes import HashingEmbeddingAPI

NOW = datetime(2030, 1, 1, tzinfo=timezone.utc)
SAID = [
    ("小明", "user", "学校门口那家店的牛肉面很好吃"),
    ("小诗", "assistant", "听起来不错，下次可以去试试"),
    ("Caroline", "user", "I went to a support group yesterday"),
    (None, "user", "今天下雨了"),
]


def turns(user_id: int = 3) -> list[TurnInput]:
    return [
        TurnInput(
            user_id=user_id,
            role=role,  # type: ignore[arg-type]
            content=content,
            sender_name=name,
            message_id=i,
            created_at=datetime(2024, 1, 1, 12, i, tzinfo=timezone.utc),
        )
        for i, (name, role, content) in enumerate(SAID, 1)
    ]


def speaker_texts() -> list[str]:
    return [indexed_text(content, name, WITH_SPEAKER) for name, _, content in SAID]


@pytest.fixture
def server() -> HashingEmbeddingAPI:
    return HashingEmbeddingAPI(dim=64)


async def open_with(memory_factory, server: HashingEmbeddingAPI, **overrides):
    return await memory_factory(
        embedder=server.embedder(), embedding_provider="api", embedding_dim=64, **overrides
    )


async def stored_rows(memory) -> list[asyncpg.Record]:
    async with memory.parts.database.pool.acquire() as conn:
        return await conn.fetch(
            "SELECT content, text_form, tsvector_to_array(keywords) AS terms, "
            "embedding IS NOT NULL AS embedded FROM dialogues ORDER BY id"
        )


def test_the_speaker_form_prefixes_a_named_turn_and_leaves_a_nameless_one_as_it_is():
    assert indexed_text("那家店很好吃", "小明", WITH_SPEAKER) == "小明: 那家店很好吃"
    assert indexed_text("那家店很好吃", " 小\n明 ", WITH_SPEAKER) == "小 明: 那家店很好吃"
    assert indexed_text("那家店很好吃", None, WITH_SPEAKER) == "那家店很好吃"
    assert indexed_text("那家店很好吃", "小明", CONTENT_ONLY) == "那家店很好吃"
    with pytest.raises(ValueError, match="text form"):
        indexed_text("x", "y", 8)


async def test_speaker_name_reaches_the_embedding_input_and_the_keyword_terms(
    memory_factory, server
):
    memory = await open_with(memory_factory, server, memory_index_speaker=True)
    first = await memory.parts.writer.add_turn(turns()[0])
    await memory.parts.writer.add_dialogues(turns()[1:])
    assert server.inputs == speaker_texts()
    rows = await stored_rows(memory)
    # The prompt and every display keep the content; only the search sees the name.
    assert first.turn is not None and first.turn.content == SAID[0][2]
    assert [r["content"] for r in rows] == [content for _, _, content in SAID]
    assert all(r["text_form"] == WITH_SPEAKER for r in rows)
    assert "小明" in rows[0]["terms"] and "小诗" in rows[1]["terms"]
    assert "caroline" in rows[2]["terms"]
    # Found by who said it, through the keyword channel alone.
    found = await memory.parts.retriever.recall(
        3, "小明说的那家店", options=RecallOptions(mode="keyword", top_n=1, window_size=0, now=NOW)
    )
    assert [t.content for t in found.turns] == [SAID[0][2]]
    found = await memory.parts.retriever.recall(
        3,
        "Caroline's support group",
        options=RecallOptions(mode="keyword", top_n=1, window_size=0, now=NOW),
    )
    assert [t.content for t in found.turns] == [SAID[2][2]]


async def test_the_content_form_keeps_names_out_of_the_search(memory_factory, server):
    memory = await open_with(memory_factory, server)
    await memory.parts.writer.add_dialogues(turns())
    assert server.inputs == [content for _, _, content in SAID]
    rows = await stored_rows(memory)
    assert all(r["text_form"] == CONTENT_ONLY for r in rows)
    assert "小明" not in rows[0]["terms"]


async def test_keyword_and_embedding_backfills_make_their_text_in_the_rows_own_form(
    memory_factory, server
):
    memory = await open_with(memory_factory, server, memory_index_speaker=True)
    server.healthy = False
    await memory.parts.writer.add_dialogues(turns())
    async with memory.parts.database.pool.acquire() as conn:
        await conn.execute("UPDATE dialogues SET keywords = NULL")
    server.healthy = True
    assert await memory.parts.upkeep.backfill_embeddings() == len(SAID)
    assert await memory.parts.upkeep.backfill_keywords() == len(SAID)
    assert server.inputs == speaker_texts()
    rows = await stored_rows(memory)
    assert all(r["embedded"] for r in rows) and "小明" in rows[0]["terms"]


async def test_switching_the_speaker_form_on_reindexes_old_rows_in_bounded_resumable_rounds(
    memory_factory, server
):
    old = await open_with(memory_factory, server)
    await old.parts.writer.add_dialogues(turns())
    await old.aclose()
    server.inputs.clear()

    memory = await open_with(memory_factory, server, memory_index_speaker=True)
    assert memory.parts.upkeep.reindex_due
    # A round with no time to spare does one batch and leaves the rest for the next round.
    assert await memory.parts.upkeep.reindex_text_form(batch_size=3, max_seconds=0) == 3
    forms = [r["text_form"] for r in await stored_rows(memory)]
    assert forms == [WITH_SPEAKER] * 3 + [CONTENT_ONLY]
    assert await memory.parts.upkeep.reindex_text_form(batch_size=3, max_seconds=0) == 1
    assert await memory.parts.upkeep.reindex_text_form(batch_size=3) == 0
    assert not memory.parts.upkeep.reindex_due
    assert server.inputs == speaker_texts()
    rows = await stored_rows(memory)
    assert all(r["text_form"] == WITH_SPEAKER and r["embedded"] for r in rows)
    assert "小明" in rows[0]["terms"]
    async with memory.parts.database.pool.acquire() as conn:
        meta = await conn.fetchval("SELECT value FROM memory_meta WHERE key = $1", TEXT_FORM_META)
    assert meta == str(WITH_SPEAKER)


async def test_the_maintenance_loop_reindexes_by_itself_until_no_row_has_the_old_form(
    memory_factory, server
):
    old = await open_with(memory_factory, server)
    await old.parts.writer.add_dialogues(turns())
    await old.aclose()

    memory = await open_with(memory_factory, server, memory_index_speaker=True)
    memory.start_maintenance(interval=0.05)
    for _ in range(1200):  # polling (60 s at most) for the background re-index, not timing it
        if [r["text_form"] for r in await stored_rows(memory)] == [WITH_SPEAKER] * len(SAID):
            break
        await asyncio.sleep(0.05)
    rows = await stored_rows(memory)
    assert [r["text_form"] for r in rows] == [WITH_SPEAKER] * len(SAID)
    assert set(speaker_texts()) <= set(server.inputs)


async def test_reembed_after_the_change_leaves_no_row_with_the_old_text_form(
    memory_factory, server
):
    old = await open_with(memory_factory, server)
    await old.parts.writer.add_dialogues(turns())
    settings = old.parts.settings
    await old.aclose()
    server.inputs.clear()

    changed = MemorySettings(
        **{**settings.model_dump(), "memory_index_speaker": True},
    )
    memory = await open_memory(
        changed, embedder=server.embedder(), allow_model_change=True, maintenance_interval=None
    )
    try:
        assert await memory.reembed(batch_size=2) == len(SAID)
        assert server.inputs == speaker_texts()
        rows = await stored_rows(memory)
        assert all(r["text_form"] == WITH_SPEAKER for r in rows)
        assert "小明" in rows[0]["terms"]
    finally:
        await memory.aclose()
    # The metadata says every row is in the form: a later start has no walk to do.
    reopened = await open_with(memory_factory, server, memory_index_speaker=True)
    assert not reopened.parts.upkeep.reindex_due
