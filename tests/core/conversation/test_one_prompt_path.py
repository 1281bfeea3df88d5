"""The console's recall debugger shows the prompt the bot really sends: both prepare it on one
path (``conversation.preparation``), the conversational query included."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone

import pytest

from memory_core.console import trace_recall
from memory_core.conversation.engine import ConversationEngine, Delivery, Outcome
from memory_core.models import TurnInput
from memory_core.service import TemporalMemory

NOW = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)  # in the past: no turn is stored dated ahead
USER, GROUP = 1, 555
NOODLES = "学校门口那家面馆叫老张面馆，牛肉面很好吃"


class RecordingModel:
    """A ChatModel that keeps every prompt it is sent."""

    def __init__(self) -> None:
        self.prompts: list[list[dict[str, str]]] = []

    async def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> str:
        self.prompts.append([dict(m) for m in messages])
        return "叫老张面馆。"

    async def aclose(self) -> None:
        return None


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
        await memory.add_turn(turn)
    message = "那家店叫什么来着"
    stored_before = await stored_turns(memory)

    trace = await trace_recall(
        memory,
        user_id=USER,
        group_id=group,
        message=message,
        now=NOW,
        sender_name="小明",
        bot_name="小诗",
        group_name=group_name,
    )
    assert await stored_turns(memory) == stored_before  # the debugger stores nothing

    model = RecordingModel()
    engine = ConversationEngine(memory=memory, chat_model=model, bot_name="小诗", clock=lambda: NOW)

    async def send(text: str) -> Delivery:
        return Delivery(text=text, message_id=9001)

    result = await engine.converse(said(message, 0, group), send, group_name=group_name)

    assert result.outcome is Outcome.REPLIED
    [sent] = model.prompts
    assert list(trace.messages) == sent
    # The conversational query (the recent lines about the noodle shop) found the old line.
    assert NOODLES in sent[-1]["content"]
    assert trace.search_text.endswith(message) and "面馆" in trace.search_text
    [noodles] = [c for c in trace.candidates if c.turn is not None and c.turn.content == NOODLES]
    assert noodles.fate == "进入提示词"  # the candidates are the bot's recall's, widened
