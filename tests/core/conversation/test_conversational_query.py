"""Recall forms its query from the message and the recent turns of the same session
(MEMORY_QUERY_CONTEXT_TURNS), never another session's; time words come from the message."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from memory_core.conversation.engine import ConversationEngine, Delivery, Outcome
from memory_core.models import TurnInput
from memory_core.providers.llm import build_openai_model
from memory_core.recall.options import RecallOptions
from memory_core.settings import ModelEndpoint
from tests.fakes import Answer, HashingEmbeddingAPI, ScriptedLLM

NOW = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)  # in the past: no turn is stored dated ahead
USER, GROUP = 1, 555


def said(
    text: str, minutes_ago: float, *, group: int | None = None, role: str = "user"
) -> TurnInput:
    return TurnInput(
        user_id=USER,
        group_id=group,
        self_id=10001,
        role=role,  # type: ignore[arg-type]
        content=text,
        sender_name="小明" if role == "user" else "小诗",
        created_at=NOW - timedelta(minutes=minutes_ago),
    )


@pytest.fixture
def server() -> HashingEmbeddingAPI:
    return HashingEmbeddingAPI(dim=64)


@pytest.fixture
def chat_server():
    running = ScriptedLLM(lambda messages: Answer("它叫面面馆，在学校门口。"))
    yield running
    running.close()


async def open_with(memory_factory, server: HashingEmbeddingAPI, **overrides):
    return await memory_factory(
        embedder=server.embedder(), embedding_provider="api", embedding_dim=64, **overrides
    )


def query_inputs(server: HashingEmbeddingAPI, message: str) -> list[str]:
    """The texts embedded as the query of ``message`` (it ends them; stored turns are
    embedded as they were said)."""
    return [text for text in server.inputs if text.endswith(message) and text != message]


async def test_the_bots_query_holds_this_sessions_recent_turns_and_never_another_sessions(
    memory_factory, server, chat_server
):
    memory = await open_with(memory_factory, server, memory_query_context_turns=4)
    # The same person talks in a private chat (session "1") and in a group (session "555:1").
    for turn in [
        said("我家的猫叫咪咪", 60 * 24 * 30),
        said("上周去了学校门口那家面馆，牛肉面很好吃", 10),
        said("听起来不错，是哪家呀", 9, role="assistant"),
        said("群里有人推荐过火锅店", 8, group=GROUP),
        said("那家火锅店在市中心", 7, group=GROUP),
        said("就是开了很多年的那家", 6),
    ]:
        await memory.parts.writer.add_turn(turn)
    endpoint = ModelEndpoint("LLM", chat_server.base_url, None, "stub-chat", 5.0)
    model = build_openai_model(endpoint, max_retries=0, max_tokens=None, temperature=None)
    engine = ConversationEngine(
        parts=memory.parts, chat_model=model, bot_name="小诗", clock=lambda: NOW
    )

    async def send(text: str) -> Delivery:
        return Delivery(text=text, message_id=9001)

    try:
        message = "那家店叫什么来着"
        result = await engine.converse(said(message, 0), send)
    finally:
        await model.aclose()
    assert result.outcome is Outcome.REPLIED
    # Embedded for the dialogue and again for the facts (the bot's embedding cache serves
    # the second): one text.
    [query] = set(query_inputs(server, message))
    assert query.split("\n") == [
        "上周去了学校门口那家面馆，牛肉面很好吃",
        "听起来不错，是哪家呀",
        "就是开了很多年的那家",
        message,
    ]
    assert "火锅" not in query  # the group's turns belong to another session


async def test_with_no_context_turns_the_message_alone_is_the_query(memory_factory, server):
    memory = await open_with(memory_factory, server, memory_query_context_turns=0)
    await memory.parts.writer.add_turn(said("上周去了学校门口那家面馆", 10))
    result = await memory.parts.retriever.recall(
        USER,
        "那家店叫什么来着",
        options=RecallOptions(context=["上周去了学校门口那家面馆"], now=NOW),
    )
    assert result.search_text == "那家店叫什么来着"
    assert query_inputs(server, "那家店叫什么来着") == []


async def test_time_words_of_the_earlier_lines_are_not_read_as_the_asked_range(
    memory_factory, server
):
    memory = await open_with(memory_factory, server, memory_query_context_turns=2)
    await memory.parts.writer.add_turn(said("学校门口那家面馆的牛肉面很好吃", 60 * 24 * 20))
    await memory.parts.writer.add_turn(said("昨天下雨了", 60 * 24))
    context = ["好久没去学校门口了", "昨天下雨了", "学校门口那家面馆还开着吗"]
    result = await memory.parts.retriever.recall(
        USER,
        "那家店叫什么来着",
        options=RecallOptions(context=context, top_n=1, window_size=0, now=NOW),
    )
    # Only the last two earlier lines join; "昨天" in them does not narrow recall to yesterday.
    assert result.search_text == "昨天下雨了\n学校门口那家面馆还开着吗\n那家店叫什么来着"
    assert [t.content for t in result.turns] == ["学校门口那家面馆的牛肉面很好吃"]
    # A time word in the message itself still is.
    asked = await memory.parts.retriever.recall(
        USER,
        "昨天说了什么",
        options=RecallOptions(context=context, top_n=1, window_size=0, now=NOW),
    )
    assert [t.content for t in asked.turns] == ["昨天下雨了"]
