"""The reply's wait for its own picture (``converse(ready=...)``) happens in the session's turn:
a message of the same session sent meanwhile is stored and answered after it."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime, timezone

from memory_core.conversation.engine import ConversationEngine
from memory_core.models import TurnInput
from tests.core.conversation.test_chat import Outbox, RecordingModel, user_turn

EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)


async def test_a_later_message_waits_for_the_picture_message_before_it(memory_factory):
    memory = await memory_factory()
    model = RecordingModel()
    engine = ConversationEngine(parts=memory.parts, chat_model=model, bot_name="小诗")
    picture_read = asyncio.Event()
    waiting = asyncio.Event()

    async def ready(turn: TurnInput) -> TurnInput:
        waiting.set()
        await picture_read.wait()  # the picture is being read
        return dataclasses.replace(turn, content="帮我记一下[图片：文字 取件码8848]")

    first = asyncio.create_task(
        engine.converse(user_turn("帮我记一下[图片]", message_id=1), Outbox(), ready=ready)
    )
    await waiting.wait()
    second = asyncio.create_task(engine.converse(user_turn("记下了吗", message_id=2), Outbox()))
    await asyncio.sleep(0)  # the second message is under way before the picture is read
    picture_read.set()
    await asyncio.gather(first, second)
    turns = await memory.parts.retriever.recent_turns(1, None, limit=10, since=EPOCH)
    assert [t.content for t in turns if t.role == "user"] == [
        "帮我记一下[图片：文字 取件码8848]",
        "记下了吗",
    ]
    assert "取件码8848" in model.text(0)
