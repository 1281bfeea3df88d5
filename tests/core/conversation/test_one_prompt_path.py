"""The console's recall debugger shows the prompt the bot really sends: both prepare it on one
path (``conversation.preparation``), the conversational query included."""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime, timedelta, timezone

import pytest

from memory_core.console import trace_recall
from memory_core.conversation import preparation
from memory_core.conversation.engine import ConversationEngine, Delivery, Outcome
from memory_core.models import TurnInput
from memory_core.service import TemporalMemory
from tests.fakes import RecordingModel

NOW = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)  # in the past: no turn is stored dated ahead
USER, GROUP = 1, 555
NOODLES = "学校门口那家面馆叫老张面馆，牛肉面很好吃"


def said(text: str, minutes_ago: float, group: int | None, *, role: str = "user") -> TurnInput:
    return TurnInput(
        user_id=USER,
        group_id=group,
        self_id=10001,
        role=role,  # type: ignore[arg-type]
        content=text,
        sender_name="小明" if role == "user" else "小诗",
        created_at=NOW - timedelta(minutes=minutes_ago),
    )


async def stored_turns(memory: TemporalMemory) -> int:
    return sum((await memory.stats(NOW)).store.by_type_role.values())


@pytest.mark.parametrize(
    ("group", "group_name"), [(None, None), (GROUP, "面食爱好者")], ids=["private", "group"]
)
async def test_the_debuggers_prompt_is_the_one_the_bot_sends_context_included(
    memory_factory, group, group_name
):
    # Few anchors, no window: among lines like the message, what the query holds besides it
    # decides which old line reaches the prompt.
    memory = await memory_factory(
        memory_top_n=3, memory_window_size=0, memory_query_context_turns=2
    )
    days = 60 * 24
    for turn in [
        said(NOODLES, 20 * days, group),
        said("那家花店叫什么来着，我忘了", 15 * days, group),
        said("那家书店叫什么来着，就在地铁站旁边", 12 * days, group),
        said("那家理发店叫什么来着", 11 * days, group),
        said("那家咖啡店叫什么来着", 9 * days, group),
        said("那家花店叫什么来着", 8 * days, group),
        said("上周又去了学校门口那家面馆，牛肉面还是很好吃", 10, group),
        said("听起来不错，是哪家面馆呀", 9, group, role="assistant"),
    ]:
        await memory.parts.writer.add_turn(turn)
    message = "那家店叫什么来着"
    stored_before = await stored_turns(memory)

    trace = await trace_recall(
        memory.parts,
        user_id=USER,
        group_id=group,
        message=message,
        now=NOW,
        sender_name="小明",
        bot_name="小诗",
        group_name=group_name,
    )
    assert await stored_turns(memory) == stored_before  # the debugger stores nothing

    model = RecordingModel("叫老张面馆。")
    engine = ConversationEngine(
        parts=memory.parts, chat_model=model, bot_name="小诗", clock=lambda: NOW
    )

    async def send(text: str) -> Delivery:
        return Delivery(text=text, message_id=9001)

    result = await engine.converse(said(message, 0, group), send, group_name=group_name)

    assert result.outcome is Outcome.REPLIED
    [sent] = model.prompts
    assert list(trace.messages) == sent
    # In a private chat the memory lines carry the numbers a reply cites: the debugger shows
    # them as the model gets them (conversation.citation).
    numbered = re.search(r"^#1 \[", sent[-1]["content"], re.MULTILINE)
    assert (numbered is not None) == (group is None)
    # The conversational query (the recent lines about the noodle shop) found the old line.
    assert NOODLES in sent[-1]["content"]
    assert trace.search_text.endswith(message) and "面馆" in trace.search_text
    [noodles] = [c for c in trace.candidates if c.turn is not None and c.turn.content == NOODLES]
    assert noodles.fate == "进入提示词"  # the candidates are the bot's recall's, widened


async def test_after_the_short_term_window_stepped_the_debugger_still_shows_the_bots_prompt(
    memory_factory, monkeypatch
):
    # Two recent turns at least: the window grows to four, then drops its oldest half.
    monkeypatch.setattr(preparation, "RECENT_GROWTH", 2)
    memory = await memory_factory(chat_recent_turns=2, memory_top_n=1, memory_window_size=0)
    model = RecordingModel("叫老张面馆。")
    clock = [NOW]
    engine = ConversationEngine(
        parts=memory.parts, chat_model=model, bot_name="小诗", clock=lambda: clock[0]
    )

    sent_ids = iter(range(9100, 9200))

    async def send(text: str) -> Delivery:
        clock[0] += timedelta(seconds=20)  # the reply comes a little after the message
        return Delivery(text=text, message_id=next(sent_ids))

    def message(text: str, minute: int) -> TurnInput:
        clock[0] = NOW + timedelta(minutes=minute)
        return dataclasses.replace(said(text, 0, None), created_at=clock[0])

    for minute, text in enumerate(["第一句", "第二句", "第三句"]):
        await engine.converse(message(text, minute), send)  # six turns: the window stepped
    # The earlier turns' vectors land in the background (embed_later): both looks and the
    # bot must see them landed, or the vector channel differs between them.
    await memory.parts.writer.settle_embeddings()
    fourth = message("第四句", 3)
    looks = [
        await trace_recall(
            memory.parts,
            user_id=USER,
            group_id=None,
            message="第四句",
            now=clock[0],
            sender_name="小明",
            bot_name="小诗",
            preparer=engine.preparer,
        )
        for _ in range(2)  # looking twice shows the same prompt
    ]
    await engine.converse(fourth, send)
    sent = model.prompts[-1]
    assert "第一句" not in str(sent) and "第三句" in str(sent)  # the window did step
    assert list(looks[0].messages) == list(looks[1].messages) == sent
