"""Names that count (issue 26 part 2): with the speaker in the index (MEMORY_INDEX_SPEAKER), a
question about what one person said reaches that person's turns, in a two-person chat where
both said something about the same thing. Real PostgreSQL and the bundled model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from memory_core.providers.embedding.local import LocalE5Embedder
from memory_core.recall.options import RecallOptions
from tests.turns import said

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
USER = 9
# (role, speaker, text): each chat has the user and the other person say much the same about
# the same thing, the other person later (a tie would go to the newer turn): only the name
# tells them apart.
CHATS = {
    "zh": [
        ("user", "小明", "学校门口那家面包店的吐司很好吃"),
        ("assistant", "小诗", "公司楼下那家面包店的可颂很好吃"),
        ("assistant", "小诗", "周末要不要一起去爬山"),
        ("user", "小明", "我最近在学做饭"),
    ],
    "en": [
        ("user", "Caroline", "I went to an LGBTQ support group yesterday and it was so powerful"),
        ("assistant", "Melanie", "I went to a support group for new moms and it was so helpful"),
        ("assistant", "Melanie", "I painted a lake sunrise last weekend"),
        ("user", "Caroline", "I am thinking about adopting a child"),
    ],
}
QUESTIONS = {
    "zh": ("小明上次说的那家面包店", "学校门口那家面包店的吐司很好吃"),
    "en": (
        "What did Caroline say about the support group?",
        "I went to an LGBTQ support group yesterday and it was so powerful",
    ),
}


@pytest.fixture
async def local() -> AsyncIterator[LocalE5Embedder]:
    embedder = await LocalE5Embedder.load()
    yield embedder
    await embedder.aclose()


async def first_recalled(memory_factory, local, language: str, **overrides: Any) -> str:  # type: ignore[no-untyped-def]
    memory = await memory_factory(embedder=local, **overrides)
    start = NOW - timedelta(days=3)
    await memory.add_dialogues(
        [
            said(USER, text, start + timedelta(minutes=i), role=role, name=name)
            for i, (role, name, text) in enumerate(CHATS[language])
        ]
    )
    question, _ = QUESTIONS[language]
    result = await memory.recall(
        USER, question, options=RecallOptions(top_n=1, window_size=0, now=NOW)
    )
    return result.turns[0].content


@pytest.mark.parametrize("language", ["zh", "en"])
async def test_a_third_person_question_finds_the_named_speakers_turn(
    memory_factory, local, language
):
    found = await first_recalled(memory_factory, local, language, memory_index_speaker=True)
    assert found == QUESTIONS[language][1]


@pytest.mark.parametrize("language", ["zh", "en"])
async def test_without_the_speaker_in_the_index_the_other_persons_turn_comes_first(
    memory_factory, local, language
):
    found = await first_recalled(memory_factory, local, language, memory_index_speaker=False)
    assert found != QUESTIONS[language][1]
