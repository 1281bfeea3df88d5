"""LoCoMo-dev in the public-set bench: its loader (on the real file when it is beside the
repository, else on a hand-made one of the same shape), the protocol's times and evidence, and
the plain BM25 printed beside the bot's figures."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from bench.public import locomo
from bench.public.bm25 import BM25, tokens
from bench.public.scoring import Case, Item, Task
from bench.public.windows import bm25_figures, widened

ROOT = locomo.data_dir()
needs_locomo = pytest.mark.skipif(
    not (ROOT / locomo.FILE).is_file(), reason=f"LoCoMo-dev not found at {ROOT}"
)
UTC = timezone.utc


def raw_conversation() -> dict[str, Any]:
    """Two sessions in the file's shape, listed out of order, with malformed evidence."""
    return {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Caroline",
            "speaker_b": "Melanie",
            "session_2_date_time": "10:37 am on 27 June, 2023",
            "session_2": [
                {"speaker": "Melanie", "dia_id": "D2:1", "text": "I ran a charity race!"},
                {"speaker": "Caroline", "dia_id": "D2:2", "text": "Wow, well done."},
            ],
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Caroline", "dia_id": "D1:1", "text": "Hey Mel!"},
                {
                    "speaker": "Melanie",
                    "dia_id": "D1:2",
                    "text": "Look at this.",
                    "img_url": ["http://example.invalid/a.jpg"],
                    "blip_caption": "a photo of a dog",
                },
                {"speaker": "Caroline", "dia_id": "D1:3", "text": "I went to a support group."},
            ],
        },
        "qa": [
            {"question": "What did Melanie run?", "evidence": ["D:2:1"], "category": 4},
            {"question": "Q2", "evidence": ["D1:03; D2:2", "(D1:3)", "D9:9"], "category": 1},
            {"question": "Q3", "evidence": ["D"], "category": 2},  # nothing left: not asked
            {"question": "Q4", "evidence": ["D1:1"], "category": 5, "adversarial_answer": "x"},
        ],
    }


def test_a_conversation_is_timed_by_the_protocol_and_its_evidence_normalised() -> None:
    chat = locomo.conversation(raw_conversation(), UTC)
    assert [t.dia_id for t in chat.turns] == ["D1:1", "D1:2", "D1:3", "D2:1", "D2:2"]
    start = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert [t.at for t in chat.turns[:3]] == [start + timedelta(seconds=30 * i) for i in range(3)]
    assert chat.turns[3].at == datetime(2023, 6, 27, 10, 37, tzinfo=UTC)
    assert chat.turns[1].text == "Look at this."  # the picture's caption is not chat text
    assert [q.evidence for q in chat.questions] == [
        ("D2:1",),
        ("D1:3", "D2:2"),
        (),
        ("D1:1",),
    ]


def test_the_task_asks_categories_one_to_four_after_the_last_turn() -> None:
    chat = locomo.conversation(raw_conversation(), UTC)
    task = locomo.task([chat])
    assert [(i.role, i.speaker) for i in task.items[:2]] == [
        ("user", "Caroline"),
        ("assistant", "Melanie"),
    ]
    assert [c.queries["question"] for c in task.cases] == ["What did Melanie run?", "Q2"]
    base = locomo.UNITS_PER_CONVERSATION
    assert task.cases[0].relevant == {base + 3}
    assert task.cases[1].relevant == {base + 2, base + 4}
    assert all(c.now == chat.turns[-1].at + timedelta(seconds=30) for c in task.cases)
    assert task.window == 2
    assert task.groups == {"conv-x/q0": "4 single-hop", "conv-x/q1": "1 multi-hop"}


@needs_locomo
def test_the_shared_file_reads_as_the_readme_describes() -> None:
    conversations = locomo.load(ROOT, UTC)
    assert [c.id for c in conversations] == ["conv-26", "conv-30", "conv-41", "conv-42", "conv-43"]
    first = conversations[0]
    assert (first.speaker_a, first.speaker_b) == ("Caroline", "Melanie")
    assert first.turns[0].dia_id == "D1:1" and first.turns[0].speaker == "Caroline"
    assert first.turns[0].at == datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    assert all(369 <= len(c.turns) <= 680 for c in conversations)
    assert sum(len(c.questions) for c in conversations) == 999
    known = {c.id: {t.dia_id for t in c.turns} for c in conversations}
    assert all(set(q.evidence) <= known[c.id] for c in conversations for q in c.questions)
    task = locomo.task(conversations)
    asked = sum(locomo.asked(q) for c in conversations for q in c.questions)
    assert len(task.cases) == asked and 700 < asked < 999


def test_bm25_ranks_the_turn_with_the_exact_term_first() -> None:
    corpus = [
        "I love going to the beach with my kids",
        "We went camping in the mountains last summer",
        "My kids love the beach, the beach is the best",
        "I signed up for a pottery class yesterday",
        "the the the the beach",
    ]
    index = BM25(corpus)
    assert index.ranked("When did Melanie sign up for pottery?")[0] == 3
    assert index.ranked("camping")[:1] == [1]
    assert index.ranked("violin lessons") == []
    assert tokens("Caroline's LGBTQ group!") == ["caroline", "s", "lgbtq", "group"]


def test_bm25_figures_count_the_window_around_its_best_turns() -> None:
    now = datetime(2024, 1, 10, tzinfo=UTC)
    texts = ["hello", "how are you", "fine", "we adopted a puppy named Rex", "nice", "bye"]
    items = [
        Item(user=1, role="user", text=t, created_at=now - timedelta(minutes=9 - i), unit=100 + i)
        for i, t in enumerate(texts)
    ]

    def case(label: str, relevant: int) -> Case:
        return Case(label, 1, now, {"question": "What is the puppy called?"}, frozenset({relevant}))

    task = Task("t", "", items, [case("near", 101), case("far", 100)], {}, window=2)
    figures = bm25_figures(task)
    assert figures["near"]["any@1"] == [True]  # turn 3's window is turns 1..5
    assert figures["far"]["any@1"] == [False]
    assert widened([0, 5], 6, 2) == {0, 1, 2, 3, 4, 5}
