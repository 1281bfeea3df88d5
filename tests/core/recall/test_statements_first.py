"""Statements over questions and echoes (``recall.statements``), on the embedded PostgreSQL with
the bundled model: the line that holds a fact comes before a person's question about it, the
bot's "I don't remember" and the bot's restatement of it — in recall (the prompt's, private and
shared group), in /recall's list, whose lines keep the matched digits, and MCP ``recall``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from memory_core.agents.memory import AgentMemory
from memory_core.conversation.engine import ConversationEngine
from memory_core.dialogue.recall_store import AnchorCandidate
from memory_core.models import MemoryTurn
from memory_core.recall import retriever, statements
from memory_core.recall.listing import list_recall, prompt_lines
from memory_core.recall.options import RecallOptions
from memory_core.recall.ranking import RankedAnchor
from tests.turns import said

NOW = datetime.now(timezone.utc)
T0 = NOW - timedelta(days=2)
TEAM = 700
XIAOMING, AQIANG, XIAOHONG = 11, 12, 13
MEETING = "周五的周会改到下午三点了"
ASKED = "周会改到几点了？"
NOT_KNOWN = "这个我不记得了，你可以再告诉我一次吗？"
FILLER = ["今天中午吃了牛肉面", "我的猫叫咪咪", "周末打算去爬山", "最近在看一本小说"]


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


@pytest.fixture
def no_demotion(monkeypatch: pytest.MonkeyPatch) -> None:
    """Recall as it was before statements came first."""

    async def as_ranked(database, ranked, **_):  # type: ignore[no-untyped-def]
        return list(ranked)

    monkeypatch.setattr(retriever, "statements_first", as_ranked)


async def private_chat(memory) -> None:  # type: ignore[no-untyped-def]
    lines = [said(XIAOMING, text, at(i), None) for i, text in enumerate(FILLER)]
    lines += [
        said(XIAOMING, MEETING, at(10), None),
        said(XIAOMING, ASKED, at(60), None),
        said(XIAOMING, NOT_KNOWN, at(60.1), None, role="assistant", name="小诗"),
    ]
    await memory.parts.writer.add_dialogues(lines)


async def anchors(memory, user: int, query: str, group: int | None = None) -> list[str]:  # type: ignore[no-untyped-def]
    options = RecallOptions(top_n=3, window_size=0, now=NOW)
    result = await memory.parts.retriever.recall(user, query, group, options)
    by_id = {t.id: t.content for t in result.turns}
    return [by_id[w.anchor_id] for w in result.windows]


async def test_the_statement_comes_before_the_question_and_the_bots_dont_know(
    memory_factory, local
):
    memory = await memory_factory(embedder=local)
    await private_chat(memory)
    found = await anchors(memory, XIAOMING, "周会几点？")
    assert found[0] == MEETING, found


async def test_without_the_demotion_the_question_came_first(memory_factory, local, no_demotion):
    """The case above is one recall got wrong: the test fails if the demotion goes."""
    memory = await memory_factory(embedder=local)
    await private_chat(memory)
    found = await anchors(memory, XIAOMING, "周会几点？")
    assert found[0] != MEETING, found


async def shared_group_chat(memory) -> None:  # type: ignore[no-untyped-def]
    await memory.parts.writer.add_dialogues(
        [
            *(said(XIAOHONG, text, at(i), TEAM, name="小红") for i, text in enumerate(FILLER)),
            said(XIAOMING, MEETING, at(10), TEAM, name="小明"),
            said(AQIANG, ASKED, at(60), TEAM, name="阿强"),
            said(AQIANG, NOT_KNOWN, at(60.1), TEAM, role="assistant", name="小诗"),
        ]
    )


async def test_in_a_shared_group_anothers_statement_beats_a_members_question(memory_factory, local):
    memory = await memory_factory(embedder=local, memory_shared_groups=str(TEAM))
    await shared_group_chat(memory)
    found = await anchors(memory, XIAOHONG, "周会几点？", TEAM)
    assert found[0] == MEETING, found


async def test_in_a_shared_group_without_the_demotion_the_question_came_first(
    memory_factory, local, no_demotion
):
    memory = await memory_factory(embedder=local, memory_shared_groups=str(TEAM))
    await shared_group_chat(memory)
    found = await anchors(memory, XIAOHONG, "周会几点？", TEAM)
    assert found[0] != MEETING, found


CODE = "对了跟你说一下，公司新换了门禁，我的工位密码改成7351了，别告诉别人"
ECHO = "好的，记住啦：你的工位密码是7351"  # shorter, hence nearer a short query


async def echoed_chat(memory) -> None:  # type: ignore[no-untyped-def]
    lines = [said(XIAOMING, text, at(i), None) for i, text in enumerate(FILLER)]
    lines += [
        said(XIAOMING, CODE, at(10), None),
        said(XIAOMING, ECHO, at(10.1), None, role="assistant", name="小诗"),
    ]
    await memory.parts.writer.add_dialogues(lines)


async def test_the_bots_echo_ranks_below_the_line_it_restates(memory_factory, local):
    memory = await memory_factory(embedder=local)
    await echoed_chat(memory)
    found = await anchors(memory, XIAOMING, "工位密码")
    assert found.index(CODE) < found.index(ECHO), found


async def test_without_the_demotion_the_echo_came_first(memory_factory, local, no_demotion):
    memory = await memory_factory(embedder=local)
    await echoed_chat(memory)
    found = await anchors(memory, XIAOMING, "工位密码")
    assert found.index(ECHO) < found.index(CODE), found


async def test_recall_lists_the_statement_first_and_keeps_the_digits_asked_for(
    memory_factory, local
):
    memory = await memory_factory(embedder=local)
    parcel = (
        "刚刚收到菜鸟驿站的短信，说我买的那箱书到了放在东门的柜子里，取件码4-2-1187，"
        "晚上八点前要取走"
    )
    await memory.parts.writer.add_dialogues(
        [
            *(said(XIAOMING, text, at(i), None) for i, text in enumerate(FILLER)),
            said(XIAOMING, parcel, at(10), None),
            said(XIAOMING, "取件码是多少来着？", at(60), None),
            said(XIAOMING, "抱歉，我没有找到取件码的记录。", at(60.1), None, role="assistant"),
        ]
    )
    listing = await list_recall(memory.parts, XIAOMING, "取件码是多少", None, now=NOW, items=5)
    assert listing.turns[0].content == parcel, [t.content for t in listing.turns]
    line = listing.excerpt(parcel, 30)
    assert "4-2-1187" in line and line.startswith("…"), line


async def test_mcp_recall_returns_nothing_for_an_unrelated_query(memory_factory, local):
    memory = await memory_factory(embedder=local)
    await private_chat(memory)
    agent = AgentMemory(
        memory.parts, ConversationEngine(parts=memory.parts, chat_model=None), "test"
    )
    answer = await agent.recall(XIAOMING, "工位密码")
    assert answer["turns"] == [] and answer["facts"] == []
    answer = await agent.recall(XIAOMING, "周会几点？")
    assert answer["turns"][0]["content"] == MEETING


def anchor(turn_id: int, score: float) -> RankedAnchor:
    return RankedAnchor(AnchorCandidate(turn_id, T0, score), score)


def turn(turn_id: int, text: str, role: str = "user") -> MemoryTurn:
    return MemoryTurn(
        turn_id, f"u{turn_id}", "1", None, 1, None, "private", role, text,  # type: ignore[arg-type]
        None, None, at(turn_id), None, None, 10,
    )  # fmt: skip


def test_a_question_with_no_statement_about_it_keeps_its_place() -> None:
    """A topic that comes back is found by the question that opened it (Chit-Chat)."""
    ranked = [anchor(1, 0.9), anchor(2, 0.8), anchor(3, 0.7)]
    turns = [
        turn(1, "What's your favourite movie?"),
        turn(2, "I went camping with my kids last weekend"),
        turn(3, "My favourite movie is Spirited Away"),
    ]
    order = [a.candidate.id for a in statements.demoted(ranked, turns, head=3)]
    assert order == [2, 3, 1]  # just under the statement it is about
    order = [a.candidate.id for a in statements.demoted(ranked[:2], turns[:2], head=2)]
    assert order == [1, 2]


# ------------------------------------------------ one path: the lines the prompt would carry


async def test_mcp_recall_gives_the_lines_the_prompt_carries(memory_factory, local):
    """MCP ``recall`` with its defaults lists the dialogue turns the bot's prompt carries for
    the same message (the context builder's), the statement first; ``top_n`` still lists that
    many anchors."""
    memory = await memory_factory(embedder=local)
    lines = [said(XIAOMING, text, at(i), None) for i, text in enumerate(FILLER * 3)]
    lines += [
        said(XIAOMING, MEETING, at(20), None),
        said(XIAOMING, ASKED, at(60), None),
        said(XIAOMING, NOT_KNOWN, at(60.1), None, role="assistant", name="小诗"),
    ]
    await memory.parts.writer.add_dialogues(lines)
    agent = AgentMemory(
        memory.parts, ConversationEngine(parts=memory.parts, chat_model=None), "test"
    )
    prompt = await memory.parts.context_builder.build(
        XIAOMING, None, "周会几点？", now=NOW, touch=False
    )
    answer = await agent.recall(XIAOMING, "周会几点？")
    listed = [t["id"] for t in answer["turns"]]
    assert sorted(listed) == sorted(prompt.turn_ids) and len(listed) > 3, answer["turns"]
    assert answer["turns"][0]["content"] == MEETING
    [one] = (await agent.recall(XIAOMING, "周会几点？", top_n=1))["turns"]
    assert one["content"] == MEETING


async def test_in_a_shared_group_the_prompts_lines_put_the_statement_first(memory_factory, local):
    """小红 asks in the shared group: what the prompt carries, /recall's list and MCP
    ``recall`` give 小明's statement before 阿强's question and the bot's "不记得"."""
    memory = await memory_factory(embedder=local, memory_shared_groups=str(TEAM))
    await shared_group_chat(memory)
    prompt = await memory.parts.context_builder.build(
        XIAOHONG, TEAM, "周会几点？", now=NOW, touch=False
    )
    listing = await list_recall(memory.parts, XIAOHONG, "周会几点？", TEAM, now=NOW)
    contents = [t.content for t in listing.turns]
    assert sorted(t.id for t in listing.turns) == sorted(prompt.turn_ids)
    assert contents[0] == MEETING, contents
    later = [contents.index(text) for text in (ASKED, NOT_KNOWN) if text in contents]
    assert all(at > 0 for at in later), contents


async def test_with_a_small_budget_the_list_is_the_fitted_block(memory_factory, local):
    """/recall and MCP ``recall`` list the lines the prompt's block keeps once fitted to the
    memory budget, not every line recall found: with a budget that holds only a few lines the
    listed turn ids equal the block's (the list had every recalled line before)."""
    memory = await memory_factory(embedder=local, memory_max_tokens=90)
    lines = [said(XIAOMING, text, at(i), None) for i, text in enumerate(FILLER * 3)]
    lines += [
        said(XIAOMING, MEETING, at(20), None),
        said(XIAOMING, "好的，我记下了", at(20.1), None, role="assistant", name="小诗"),
        said(XIAOMING, ASKED, at(60), None),
        said(XIAOMING, NOT_KNOWN, at(60.1), None, role="assistant", name="小诗"),
    ]
    await memory.parts.writer.add_dialogues(lines)
    prompt = await memory.parts.context_builder.build(
        XIAOMING, None, "周会几点？", now=NOW, touch=False
    )
    recalled = await memory.parts.retriever.recall(
        XIAOMING, "周会几点？", None, RecallOptions(now=NOW)
    )
    assert 0 < len(prompt.turn_ids) < len(prompt_lines(recalled)), prompt  # the budget bites
    listing = await list_recall(memory.parts, XIAOMING, "周会几点？", None, now=NOW)
    assert sorted(t.id for t in listing.turns) == sorted(prompt.turn_ids)
    assert listing.turns[0].content == MEETING
    agent = AgentMemory(
        memory.parts, ConversationEngine(parts=memory.parts, chat_model=None), "test"
    )
    answer = await agent.recall(XIAOMING, "周会几点？")
    assert sorted(t["id"] for t in answer["turns"]) == sorted(prompt.turn_ids)
