"""Names that count (issue 26 part 2): with the speaker in the index (MEMORY_INDEX_SPEAKER), or
with the speakers a query names in the fusion (MEMORY_SPEAKER_WEIGHT), a question about what
one person said reaches that person's turns, in a two-person chat where both said something
about the same thing. Real PostgreSQL and the bundled model."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from memory_core.models import RecallResult
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


async def stored(memory_factory, local, language: str, **overrides: Any):  # type: ignore[no-untyped-def]
    """A memory holding the language's two-person chat."""
    memory = await memory_factory(embedder=local, **overrides)
    start = NOW - timedelta(days=3)
    await memory.parts.writer.add_dialogues(
        [
            said(USER, text, start + timedelta(minutes=i), role=role, name=name)
            for i, (role, name, text) in enumerate(CHATS[language])
        ]
    )
    return memory


async def asked(memory, question: str) -> RecallResult:  # type: ignore[no-untyped-def]
    return await memory.parts.retriever.recall(
        USER, question, options=RecallOptions(top_n=3, window_size=0, now=NOW)
    )


async def recalled(
    memory_factory, local, language: str, question: str, **overrides: Any
) -> RecallResult:  # type: ignore[no-untyped-def]
    return await asked(await stored(memory_factory, local, language, **overrides), question)


async def first_recalled(memory_factory, local, language: str, **overrides: Any) -> str:  # type: ignore[no-untyped-def]
    question, _ = QUESTIONS[language]
    result = await recalled(memory_factory, local, language, question, **overrides)
    return first(result)


def first(result: RecallResult) -> str:
    """The best anchor's text."""
    by_id = {t.id: t for t in result.turns}
    return by_id[result.windows[0].anchor_id].content


@pytest.mark.parametrize("language", ["zh", "en"])
async def test_with_the_speaker_in_the_index_a_third_person_question_finds_their_turn(
    memory_factory, local, language
):
    found = await first_recalled(
        memory_factory, local, language, memory_index_speaker=True, memory_speaker_weight=0.0
    )
    assert found == QUESTIONS[language][1]


@pytest.mark.parametrize("language", ["zh", "en"])
async def test_with_names_neither_indexed_nor_asked_about_the_other_persons_turn_comes_first(
    memory_factory, local, language
):
    found = await first_recalled(
        memory_factory, local, language, memory_index_speaker=False, memory_speaker_weight=0.0
    )
    assert found != QUESTIONS[language][1]


@pytest.mark.parametrize("language", ["zh", "en"])
async def test_with_the_named_speaker_in_the_fusion_the_third_person_question_finds_their_turn(
    memory_factory, local, language
):
    # The speaker is not in the index: the name in the question is matched against the
    # chat's sender names at query time, and that speaker's turns join the fusion.
    found = await first_recalled(
        memory_factory, local, language, memory_index_speaker=False, memory_speaker_weight=1.0
    )
    assert found == QUESTIONS[language][1]


@pytest.mark.parametrize(
    ("language", "question"),
    [
        ("zh", "那家面包店的东西好吃吗"),  # names nobody
        ("en", "What was said about the support group?"),
        ("en", "What did Bob say about the support group?"),  # a name, but no participant's
    ],
)
async def test_a_question_naming_no_participant_recalls_as_before(
    memory_factory, local, language, question
):
    before = await asked(
        await stored(memory_factory, local, language, memory_speaker_weight=0.0), question
    )
    # The same database read with the setting on.
    after = await asked(await memory_factory(embedder=local, memory_speaker_weight=1.0), question)
    assert [(w.anchor_id, w.score) for w in after.windows] == [
        (w.anchor_id, w.score) for w in before.windows
    ]
    assert len(before.windows) == 3


GROUP = 4242
# A group: every member's turns in one shared memory, each with the member's group card as
# sender name; two members said much the same about bakeries, the bot (小诗) replied.
GROUP_CHAT = [
    (21, "user", "阿明（技术部）", "学校门口那家面包店的吐司很好吃"),
    (22, "user", "红红", "公司楼下那家面包店的可颂很好吃"),
    (21, "assistant", "小诗", "听起来不错，下次去尝尝"),
    (23, "user", "路人甲", "周末要不要一起去爬山"),
]


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("阿明（技术部）说的那家面包店", "学校门口那家面包店的吐司很好吃"),
        ("红红说的那家面包店叫什么", "公司楼下那家面包店的可颂很好吃"),
    ],
)
async def test_in_a_group_the_members_card_is_the_name(memory_factory, local, question, expected):
    memory = await memory_factory(
        embedder=local, memory_shared_groups=str(GROUP), memory_speaker_weight=1.0
    )
    start = NOW - timedelta(days=3)
    await memory.parts.writer.add_dialogues(
        [
            said(user, text, start + timedelta(minutes=i), GROUP, role=role, name=name)
            for i, (user, role, name, text) in enumerate(GROUP_CHAT)
        ]
    )
    # Asked by a third member: the shared group's memory is searched.
    options = RecallOptions(top_n=1, window_size=0, now=NOW)
    result = await memory.parts.retriever.recall(23, question, GROUP, options)
    assert first(result) == expected


async def test_a_name_said_to_the_bot_does_not_pull_its_turns_first(memory_factory, local):
    # "小诗，……" speaks to the bot, about the toast the user praised: its name leaves the
    # search, and the bot's turns get no prior (with one, its bakery line would come first).
    question = "小诗，吐司好吃的那家面包店在哪"
    result = await recalled(memory_factory, local, "zh", question, memory_speaker_weight=1.0)
    assert first(result) == "学校门口那家面包店的吐司很好吃"
