"""The public-set bench's own logic: the MADial-Bench parser (on the real files when they are
beside the repository), the Chit-Chat query forms, and the hit@k arithmetic."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from bench.public import chitchat, madial
from bench.public.ceiling import queries, rankings
from bench.public.run import expanded, madial_root
from bench.public.scoring import Case, Item, Task, chance, figures_from_rankings, hits

ROOT = madial_root(None)
needs_madial = pytest.mark.skipif(
    not (ROOT / "data").is_dir(), reason=f"MADial-Bench not found at {ROOT}"
)


def test_unlabelled_line_belongs_to_the_other_speaker_and_markup_is_stripped() -> None:
    lines = madial.parse_lines(
        [
            "<BOD>\n",
            '<Bart>:"嘿，你知道吗？"\n',
            '"Wow, it looks great!"\n',
            '<Bart>： "Really?"\n',
            "<Mom was right, you know.>\n",
            "<EOD>\n",
        ],
        "Bart",
    )
    assert [(x.speaker, x.role, x.text) for x in lines] == [
        ("Bart", "user", "嘿，你知道吗？"),
        ("Assistant", "assistant", "Wow, it looks great!"),
        ("Bart", "user", "Really?"),
        ("Assistant", "assistant", "Mom was right, you know."),
    ]


@needs_madial
def test_zh_dialogue_history_stops_before_the_first_test_turn() -> None:
    data = madial.load(ROOT, "zh")
    assert len(data.memories) == 171 and len(data.dialogues) == 160
    first = data.dialogues[0]
    assert first.relevant == {1, 78, 105, 113, 108}
    assert first.last_user_line() == "我特别期待那天晚上，我想让它变得很特别！"
    assert first.context().startswith("Bart: 嘿，你知道吗？元旦晚会我要表演魔术！\nAssistant: ")
    assert len(first.history) == 7  # raw lines 1..7; line 8 is the test turn
    before = first.before_last_user_line()
    assert before == [line.text for line in first.history[:6]]
    assert all(d.history[-1].role == "user" for d in data.dialogues)


@needs_madial
def test_en_memories_take_their_user_from_the_zh_file() -> None:
    zh = {m.id: m.user for m in madial.load(ROOT, "zh").memories}
    en = madial.load(ROOT, "en")
    assert len(en.memories) == 160
    assert all(zh[m.id] == m.user for m in en.memories)
    assert en.dialogues[4].history[1].role == "assistant"  # an unlabelled line in the file
    assert not en.published


@needs_madial
def test_published_openai_figures_match_the_readme_table() -> None:
    task = madial.task(madial.load(ROOT, "zh"), timezone.utc)
    openai = task.published["OpenAI embeddings"]
    assert [round(openai[f"any@{k}"], 3) for k in (1, 3, 5, 10)] == [0.644, 0.85, 0.9, 0.963]


def test_hits_any_and_all() -> None:
    assert hits([7, 3, 9], frozenset({3, 4}), 1) == (False, False)
    assert hits([7, 3, 9], frozenset({3, 4}), 3) == (True, False)
    assert hits([4, 3, 9], frozenset({3, 4}), 2) == (True, True)
    figures = figures_from_rankings({0: [1, 2], 1: [5, 6]}, {0: frozenset({2}), 1: frozenset({9})})
    assert figures["any@1"] == 0.0 and figures["any@3"] == 0.5


def test_chance_of_a_random_order() -> None:
    assert chance(4, 1, 1) == pytest.approx(0.25)
    assert chance(4, 2, 2) == pytest.approx(1 - 1 / 6)
    assert chance(3, 1, 10) == 1.0
    assert chance(5, 0, 3) == 0.0


def test_chitchat_context_keeps_the_last_lines_that_fit() -> None:
    t0 = datetime(2018, 5, 1, tzinfo=timezone.utc)
    texts = ["hi", "x" * 900, "what's your favorite smell?", "y" * 700, "coffee, for sure"]
    groups = tuple(
        (chitchat.Message("a" if i % 2 == 0 else "b", text, t0 + timedelta(minutes=i)),)
        for i, text in enumerate(texts)
    )
    conversation = chitchat.Conversation("c1", "What's your favorite smell?", t0, groups)
    opening = chitchat.opening_queries(conversation, user="a")
    assert opening is not None
    queries, earlier = opening
    assert queries["last user line"] == queries["conversation"] == "coffee, for sure"
    # The conversational form's earlier lines: every group before the user's last one.
    assert earlier == texts[:-1]
    context = queries["dialogue context"]
    assert context.startswith("User: what's your favorite smell?\nFriend: yyy")
    assert context.endswith("User: coffee, for sure")
    assert len(context) <= chitchat.CONTEXT_CHARS


def test_chitchat_people_are_the_most_frequent_below_the_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    t0 = datetime(2018, 5, 1, tzinfo=timezone.utc)

    def chat(a: str, b: str) -> chitchat.Conversation:
        groups = ((chitchat.Message(a, "hi", t0),), (chitchat.Message(b, "hello", t0),))
        return chitchat.Conversation(f"{a}{b}", "Mozart or Beethoven?", t0, groups)

    monkeypatch.setattr(chitchat, "MAX_CONVERSATIONS", 2)
    found = [chat("a", "b"), chat("a", "c"), chat("a", "d"), chat("b", "c")]
    assert chitchat.top_people(found, 2) == ["b", "c"]  # "a" (3) is above the cap


def test_the_conversation_form_is_recalled_once_for_each_count_of_earlier_lines() -> None:
    case = Case(
        label="c",
        user=1,
        now=datetime(2024, 1, 1, tzinfo=timezone.utc),
        queries={"last user line": "那家店叫什么", "conversation": "那家店叫什么"},
        relevant=frozenset({1}),
        earlier={"conversation": ["一", "二", "三"]},
    )
    assert expanded(case, [0, 2, 8]) == [
        ("last user line", "那家店叫什么", []),
        ("conversation (0 lines)", "那家店叫什么", []),
        ("conversation (2 lines)", "那家店叫什么", ["二", "三"]),
        ("conversation (8 lines)", "那家店叫什么", ["一", "二", "三"]),
    ]


def test_the_ceiling_ranks_only_the_users_turns_said_before_the_case_by_cosine() -> None:
    now = datetime(2024, 1, 10, tzinfo=timezone.utc)
    day = timedelta(days=1)

    def item(user: int, unit: int, days_before: int) -> Item:
        return Item(
            user=user, role="user", text=f"t{unit}", created_at=now - days_before * day, unit=unit
        )

    items = [item(1, 10, 3), item(1, 11, 2), item(2, 12, 2), item(1, 13, -1), item(1, 14, 5)]
    case = Case(
        label="c",
        user=1,
        now=now,
        queries={"conversation": "q"},
        relevant=frozenset({11}),
        earlier={"conversation": ["一", "二", "三"]},
    )
    task = Task(name="t", about="", items=items, cases=[case], forms={})
    stored = np.array([[1.0, 0.0], [0.6, 0.8], [1.0, 0.0], [1.0, 0.0], [0.6, 0.8]])
    asked = np.array([[0.0, 1.0]])
    # User 2's turn and the turn said after the case are never ranked; equal cosines put the
    # newer first.
    assert rankings(task, stored, asked) == {0: [11, 14, 10]}
    assert queries(case, 2) == {"conversation": "二\n三\nq", "message alone": "q"}
    assert queries(case, 0)["conversation"] == "q"
