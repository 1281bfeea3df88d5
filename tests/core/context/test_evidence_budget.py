"""One budget spent on evidence: a matching line before unrelated facts, distinct anchors and
the lines that carry their meaning before wide windows, a restatement shown once, and the
debugger reading the budget the prompt was built within."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from memory_core.console import trace_recall
from memory_core.context.block import LineBudget, build_memory_block, same_words
from memory_core.context.builder import assemble_context
from memory_core.conversation.preparation import PromptPreparer
from memory_core.dialogue.recall_store import AnchorCandidate
from memory_core.distill.memory import ExtractedMemory
from memory_core.models import MemoryTurn, RecallWindow, TurnInput
from memory_core.recall.ranking import (
    NO_FLOOR,
    AnchorFloor,
    RankedAnchor,
    evidence_windows,
    partner_of,
)

T0 = datetime(2026, 12, 7, 2, tzinfo=timezone.utc)
TZ = ZoneInfo("Asia/Shanghai")
PICTURE = "[图片：快递柜取件通知，取件码 4-2-1187，请于今日 18:00 前取件]"
UNRELATED_FACTS = (
    "用户喜欢周末去西湖边骑自行车",
    "用户的妹妹在上海读大学，学的是建筑设计",
    "用户对花生过敏，点外卖时总会备注不要花生",
    "用户每天早上七点起床后先喝一杯温水再跑步",
    "用户最近在学吉他，已经会弹三首简单的曲子",
)


def turn(turn_id: int, role: str, text: str, minutes: int, user: int = 1) -> MemoryTurn:
    return MemoryTurn(
        id=turn_id,
        message_uuid=f"u{turn_id}",
        session_key=str(user),
        self_id=None,
        user_id=user,
        group_id=None,
        chat_type="private",
        role=role,  # type: ignore[arg-type]
        content=text,
        sender_name=None,
        message_id=turn_id,
        created_at=T0 + timedelta(minutes=minutes),
        score=None,
        expires_at=None,
        token_count=len(text),
    )


def ranked(*turns: MemoryTurn) -> list[RankedAnchor]:
    return [
        RankedAnchor(AnchorCandidate(t.id, t.created_at, 0.9), 1.0 - i / 100)
        for i, t in enumerate(turns)
    ]


async def test_a_picture_line_matching_the_message_outranks_unrelated_facts_in_a_small_budget(
    memory_factory,
):
    # The screenshot case: five facts and two summaries unrelated to the question would fill
    # the budget before the dialogue; the picture's text answers the question.
    memory = await memory_factory()
    await memory.parts.keeper.save(
        [
            *(ExtractedMemory(kind="facts", content=text) for text in UNRELATED_FACTS),
            ExtractedMemory(kind="summary", content="用户聊了周末骑车的路线，打算去九溪。"),
            ExtractedMemory(kind="summary", content="用户问了吉他入门曲目，决定先练《小星星》。"),
        ],
        1,
        None,
        stated_at=T0 - timedelta(days=1),
    )
    chatter = ["今天好冷啊", "是啊，多穿点", PICTURE, "收到一张图片", "晚上吃什么好", "火锅吧"]
    for i, text in enumerate(chatter):
        await memory.parts.writer.add_turn(
            TurnInput(
                user_id=1,
                role="user" if i % 2 == 0 else "assistant",
                content=text,
                created_at=T0 + timedelta(minutes=i),
            )
        )
    now = T0 + timedelta(minutes=22)
    question = "我之前发的那张图上取件码是多少？"
    builder = memory.parts.context_builder
    preferences, facts, summaries, loose = await builder.distilled(1, None, question, now)
    assert len(facts) + len(loose) == len(UNRELATED_FACTS) and len(summaries) == 2
    # The budget: what those facts and summaries take, and a few tokens more.
    distilled_only = assemble_context(
        preferences=preferences,
        facts=[*facts, *loose],
        summaries=summaries,
        windows=[],
        budget=LineBudget(now, TZ, memory.parts.token_counter, 10_000),
    )
    budget = distilled_only.tokens + 10

    context = await builder.build(1, None, question, now=now, max_tokens=budget, touch=False)

    assert "4-2-1187" in context.text
    assert context.tokens <= budget == context.budget
    assert len(context.fact_ids) < len(UNRELATED_FACTS)  # some unrelated fact gave way


def test_an_echo_and_the_statement_it_repeats_are_shown_once():
    said = turn(1, "user", "我的工位密码是 8812", 0)
    echo = turn(2, "assistant", "好的，记住啦：我的工位密码是8812", 1)
    other = turn(3, "user", "明天要早起", 2)
    window = RecallWindow(anchor_id=2, score=1.0, similarity=0.9, turns=(said, echo, other))
    budget = LineBudget(T0 + timedelta(hours=1), TZ, _Chars(), 10_000)

    block = build_memory_block([window], budget)

    assert block.turn_ids == (1, 3)  # the person's words stay, the bot's echo goes
    assert block.text.count("8812") == 1
    assert same_words("好的，记住啦：我的工位密码是8812", "我的工位密码是 8812")
    assert not same_words("好的，明天见", "好的")


def test_the_text_of_the_best_window_is_spent_on_anchors_first_then_on_their_answers():
    chat = [
        turn(1, "assistant", "你最后去上陶艺课了吗？", 0),
        turn(2, "user", "对，上周二！", 1),
        turn(3, "assistant", "好玩吗", 2),
        turn(4, "user", "还行，就是手很脏", 3),
        turn(5, "assistant", "哈哈", 4),
        turn(20, "user", "我还报了游泳课", 30),
        turn(21, "assistant", "哪天上？", 31),
        turn(22, "user", "周四晚上", 32),
    ]
    by_id = {t.id: t for t in chat}
    anchors = ranked(by_id[2], by_id[20], by_id[4])  # best first
    rows = [
        (a.candidate.id, t)
        for a in anchors
        for t in chat
        if abs(chat.index(t) - chat.index(by_id[a.candidate.id])) <= 1
    ]

    result = evidence_windows("陶艺课是哪天", anchors, rows, top_n=1, window=1)

    # The allowance: the best anchor's ±1 window (turns 1-3, 20 characters, 3 turns). Spent
    # on the anchors first (4 does not fit beside 2 and 20), then on the line answering the
    # best one (3), not on the rest of its window (1).
    assert [t.id for t in result.turns] == [2, 3, 20]
    assert sum(len(t.content) for t in result.turns) <= 20
    assert partner_of(by_id[22], chat[5:]) == by_id[21]  # the last line: the one it answers


async def test_the_debugger_reads_the_budget_the_prompt_was_built_within(memory_factory):
    memory = await memory_factory(memory_max_tokens=1000)
    await memory.parts.writer.add_turn(
        TurnInput(user_id=1, role="user", content="我家猫叫咪咪", created_at=T0)
    )
    # As with the memory tools on: the bot's preparer gives the memory block half the budget.
    preparer = PromptPreparer(memory.parts, memory_budget=lambda group, now: 500)

    trace = await trace_recall(
        memory.parts,
        user_id=1,
        group_id=None,
        message="我家猫叫什么",
        now=T0 + timedelta(hours=1),
        preparer=preparer,
    )

    assert trace.budget == trace.context.budget == 500


class _Chars:
    def count(self, text: str) -> int:
        return len(text)


def test_turns_already_in_the_prompt_are_neither_spent_nor_counted_so_the_prompt_does_not_grow():
    # The prompt's cached prefix holds while its memory note is no longer than the windows'
    # (bench/prompt_prefix.py): turns of the short-term memory, which the prompt already
    # carries, neither fill the allowance nor make room for others.
    chat = [turn(i, "user" if i % 2 else "assistant", f"第{i}句话", i) for i in range(1, 9)]
    anchors = ranked(chat[1], chat[6], chat[3])
    rows = [
        (a.candidate.id, t)
        for a in anchors
        for t in chat
        if abs(chat.index(t) - [c.id for c in chat].index(a.candidate.id)) <= 1
    ]
    result = evidence_windows("第二句", anchors, rows, top_n=1, window=1, shown={1, 2})

    # The best anchor's ±1 window is turns 1-3; only 3 is not already in the prompt, so its
    # text is the allowance: one more line (the next anchor, 7), not three.
    assert [t.id for t in result.turns] == [7]


def test_an_anchor_far_below_the_best_gives_its_text_back():
    # Issue 36: later anchors that match the message weakly took the budget. One whose cosine
    # is more than the floor's gap below the best is not spent on; its text stays unspent or
    # goes to the kept anchors' windows.
    chat = [turn(i, "user", f"第{i}句话，说了些别的事情", i * 10) for i in range(1, 7)]
    by_id = {t.id: t for t in chat}

    def anchor(turn_id: int, similarity: float, score: float) -> RankedAnchor:
        return RankedAnchor(AnchorCandidate(turn_id, by_id[turn_id].created_at, similarity), score)

    anchors = [anchor(2, 0.90, 0.03), anchor(4, 0.88, 0.02), anchor(6, 0.83, 0.01)]
    rows = [(a.candidate.id, by_id[a.candidate.id]) for a in anchors]

    def spent(floor: AnchorFloor, shown: frozenset[int] = frozenset()) -> list[int]:
        result = evidence_windows(
            "周会", anchors, rows, top_n=3, window=0, shown=shown, floor=floor
        )
        return [t.id for t in result.turns]

    assert spent(AnchorFloor(keep=1, gap=0.04)) == [2, 4]
    assert spent(NO_FLOOR) == [2, 4, 6]
    # A turn already in the prompt sets no floor: the best one not shown does (4, at 0.88).
    anchors.insert(0, anchor(1, 0.97, 0.04))
    rows.append((1, by_id[1]))
    # (Set by the shown turn at 0.97, the floor would leave 4 out as well.)
    assert spent(AnchorFloor(keep=1, gap=0.04), shown=frozenset({1})) == [2, 4]
