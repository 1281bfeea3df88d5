"""Context in the stored text (issue 26 part 4, ``MEMORY_INDEX_CONTEXT``): a turn is indexed with
the line it answers, so a short answer ("Yes, last Tuesday!") is found by what the line before
it asked; the text shown stays the turn; every path that indexes a row gives it the same text;
a deleted line's words are not found through its answer. Real PostgreSQL; the bundled model
where recall quality is asserted, the hashing embedder where only texts are compared."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

from memory_core import Named, forget_named
from memory_core.lang.indexed import ContextLine, index_texts, text_form_for
from memory_core.lang.keywords import document_terms
from memory_core.models import RecallResult
from memory_core.recall.options import RecallOptions
from tests.turns import said

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
USER = 9
# (role, text): the answer is the fifth line; only the line before it says what it is about.
CHATS = {
    "zh": [
        ("user", "今天终于把论文交上去了"),
        ("assistant", "辛苦啦，好好休息一下"),
        ("user", "晚上想吃火锅"),
        ("assistant", "你最后去上陶艺课了吗？"),
        ("user", "对，上周二！"),
        ("assistant", "周末天气不错，可以出去走走"),
        ("user", "我养的猫最近很黏人"),
        ("assistant", "猫咪真可爱"),
    ],
    "en": [
        ("user", "Finally handed in my thesis today"),
        ("assistant", "Well done, get some rest"),
        ("user", "Thinking of hotpot tonight"),
        ("assistant", "Did you go to the pottery class in the end?"),
        ("user", "Yes, last Tuesday!"),
        ("assistant", "The weather looks nice this weekend"),
        ("user", "My cat has been very clingy lately"),
        ("assistant", "Cats are lovely"),
    ],
}
ANSWER = 4
QUESTIONS = {"zh": "我去上陶艺课是哪天", "en": "When did I go to the pottery class?"}
WORDS = {"zh": "陶艺课", "en": "pottery"}


def chat(language: str, user: int = USER, group: int | None = None) -> list[Any]:
    start = NOW - timedelta(days=3)
    return [
        said(user, text, start + timedelta(minutes=i), group, role=role, message_id=i + 1)
        for i, (role, text) in enumerate(CHATS[language])
    ]


async def anchors(memory, question: str, top_n: int = 2, **options: Any) -> list[str]:  # type: ignore[no-untyped-def]
    result: RecallResult = await memory.parts.retriever.recall(
        USER, question, options=RecallOptions(top_n=top_n, window_size=0, now=NOW, **options)
    )
    by_id = {t.id: t for t in result.turns}
    return [by_id[w.anchor_id].content for w in result.windows]


@pytest.mark.parametrize("language", ["zh", "en"])
async def test_a_short_answer_is_found_by_what_the_line_before_it_asked(
    memory_factory, local, language
):
    answer = CHATS[language][ANSWER][1]
    memory = await memory_factory(embedder=local, memory_index_context="both")
    await memory.parts.writer.add_dialogues(chat(language))
    found = await anchors(memory, QUESTIONS[language])
    assert answer in found  # shown as itself: the line it answers is not in its text
    vector_only = await anchors(memory, QUESTIONS[language], mode="vector")
    assert answer in vector_only


@pytest.mark.parametrize("language", ["zh", "en"])
async def test_without_the_setting_the_short_answer_is_not_found(memory_factory, local, language):
    memory = await memory_factory(embedder=local)  # MEMORY_INDEX_CONTEXT=off, the default
    await memory.parts.writer.add_dialogues(chat(language))
    assert CHATS[language][ANSWER][1] not in await anchors(memory, QUESTIONS[language])


@pytest.mark.parametrize("setting", ["vector", "keyword", "both"])
async def test_every_path_indexes_a_turn_with_the_same_text(memory_factory, setting):
    """Live turns (embedded now, or a moment later), a bulk insert, the backfills and the
    re-index walk give each row the embedding and keywords of the same text: the turn after the
    line of the other role before it, in the session (a group member's session in a group)."""
    memory = await memory_factory(memory_index_context=setting)
    form = text_form_for(False, setting)
    live, later, bulk, grouped = chat("en", 1), chat("en", 2), chat("en", 3), chat("zh", 4, 77)
    for turn in live:
        await memory.parts.writer.add_turn(turn)
    for turn in later:
        await memory.parts.writer.add_turn(turn, embed_later=True)
    await memory.parts.writer.settle_embeddings()
    await memory.parts.writer.add_dialogues(bulk + grouped)

    async def rows() -> dict[tuple[int, str], tuple[list[str], np.ndarray]]:
        async with memory.parts.database.pool.acquire() as conn:
            records = await conn.fetch(
                "SELECT user_id, content, tsvector_to_array(keywords) AS terms, embedding "
                "FROM dialogues ORDER BY id"
            )
        return {
            (r["user_id"], r["content"]): (
                sorted(r["terms"]),
                np.asarray(r["embedding"].to_list(), dtype=float),
            )
            for r in records
        }

    stored = await rows()
    for user, lines in ((1, live), (2, later), (3, bulk), (4, grouped)):
        before: ContextLine | None = None
        for turn in lines:
            texts = index_texts(turn.content, None, form, before)
            terms, vector = stored[(user, turn.content)]
            assert terms == sorted(set(document_terms(texts.keywords)))
            expected = (await memory.parts.embedder.embed_passages([texts.vector]))[0]
            assert np.allclose(vector, expected, atol=1e-2)
            before = ContextLine(turn.content, None)  # the roles alternate
    # The backfills, from rows without their index, and the re-index walk give the same.
    async with memory.parts.database.pool.acquire() as conn:
        await conn.execute("UPDATE dialogues SET keywords = NULL, embedding = NULL")
    await memory.parts.upkeep.backfill_keywords()
    await memory.parts.upkeep.backfill_embeddings()
    assert _same(await rows(), stored)
    async with memory.parts.database.pool.acquire() as conn:
        await conn.execute("UPDATE dialogues SET text_form = 0")
    await memory.reembed()
    assert _same(await rows(), stored)


def _same(a: dict[Any, Any], b: dict[Any, Any]) -> bool:
    return a.keys() == b.keys() and all(
        a[k][0] == b[k][0] and np.allclose(a[k][1], b[k][1], atol=1e-2) for k in a
    )


@pytest.mark.parametrize("language", ["zh", "en"])
async def test_forgetting_a_word_leaves_it_unfound_through_the_answer(
    memory_factory, local, language
):
    """/忘记 <词语> deletes the turns holding the word; the answer to one of them keeps no trace
    of it: its index goes in the same statement, and the backfills make it again from the line
    it then answers."""
    memory = await memory_factory(embedder=local, memory_index_context="both")
    await memory.parts.writer.add_dialogues(chat(language))
    word, answer = WORDS[language], CHATS[language][ANSWER][1]
    assert answer in await anchors(memory, word, top_n=5, mode="keyword")

    await forget_named(memory.parts.database, memory.parts.spool, Named(USER, None, word=word))
    assert await anchors(memory, word, top_n=5, mode="keyword") == []
    assert answer not in await anchors(memory, QUESTIONS[language], top_n=8)
    assert await memory.parts.upkeep.backfill_keywords() >= 1
    assert await memory.parts.upkeep.backfill_embeddings() >= 1

    assert await anchors(memory, word, top_n=5, mode="keyword") == []
    async with memory.parts.database.pool.acquire() as conn:
        record = await conn.fetchrow(
            "SELECT tsvector_to_array(keywords) AS terms, embedding FROM dialogues "
            "WHERE content = $1",
            answer,
        )
    # Now the line it answers is the bot's line before the deleted one.
    line = ContextLine(CHATS[language][1][1], None)
    texts = index_texts(answer, None, memory.parts.writer.text_form, line)
    assert sorted(record["terms"]) == sorted(set(document_terms(texts.keywords)))
    expected = (await memory.parts.embedder.embed_passages([texts.vector]))[0]
    assert np.allclose(np.asarray(record["embedding"].to_list(), dtype=float), expected, atol=1e-2)


async def test_an_edited_or_newly_earlier_line_has_its_answers_indexed_again(memory_factory):
    """The line an answer was indexed with changes when it is edited (the console, a picture
    read) or when a turn is stored between the two (an older history imported): the answer's
    index goes in the same statement, and the backfills make it from the line it now answers."""
    memory = await memory_factory(memory_index_context="keyword")
    await memory.parts.writer.add_dialogues(chat("en"))
    answer = CHATS["en"][ANSWER][1]

    async def answer_terms() -> list[str] | None:
        async with memory.parts.database.pool.acquire() as conn:
            terms = await conn.fetchval(
                "SELECT tsvector_to_array(keywords) FROM dialogues WHERE content = $1", answer
            )
        return None if terms is None else sorted(terms)

    def terms_after(line: str) -> list[str]:
        texts = index_texts(answer, None, memory.parts.writer.text_form, ContextLine(line, None))
        return sorted(set(document_terms(texts.keywords)))

    assert await answer_terms() == terms_after(CHATS["en"][ANSWER - 1][1])
    edited = "Did you go to the ceramics workshop in the end?"
    async with memory.parts.database.pool.acquire() as conn:
        await conn.execute(
            "UPDATE dialogues SET content = $1, keywords = array_to_tsvector($2::text[]) "
            "WHERE content = $3",
            edited,
            document_terms(edited),
            CHATS["en"][ANSWER - 1][1],
        )
    assert await answer_terms() is None
    # The edited line itself, and the user's two turns within the hour after it (each may have
    # answered it: the triggers take all the rows it may be the line of).
    assert await memory.parts.upkeep.backfill_keywords() == 3
    assert await answer_terms() == terms_after(edited)

    # A bot line imported later but said between the two is the line the answer answers now.
    between = said(
        USER,
        "Or was it the glazing lesson?",
        NOW - timedelta(days=3) + timedelta(minutes=ANSWER - 0.5),
        role="assistant",
        message_id=100,
    )
    await memory.parts.writer.add_dialogues([between])
    async with memory.parts.database.pool.acquire() as conn:
        own = await conn.fetchval(
            "SELECT tsvector_to_array(keywords) FROM dialogues WHERE message_uuid LIKE '%:100'"
        )
    # Its own line is a stored one: the user's last turn before it.
    line = ContextLine(CHATS["en"][2][1], None)
    expected = index_texts(between.content, None, memory.parts.writer.text_form, line).keywords
    assert sorted(own) == sorted(set(document_terms(expected)))
    assert await answer_terms() is None
    await memory.parts.upkeep.backfill_keywords()
    assert await answer_terms() == terms_after(between.content)
