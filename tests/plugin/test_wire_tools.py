"""The whole bot with a chat model that serves only streamed calls and calls the memory tools:
``bot.py`` as a subprocess, a OneBot v11 peer on a real WebSocket, a loopback stand-in model."""

from __future__ import annotations

import json
import time
from typing import Any

from tests.plugin.events import message_payload, text_seg
from tests.plugin.wire import chatting_bot, sent_text
from tests.tool_llm import Reply, ToolLLM, tool_messages

STREAM_ONLY = "This model only support stream mode, please enable the stream parameter"


def model(body: dict[str, Any]) -> Reply:
    """Streams only; asked about a password, searches the memory first, then says what it got."""
    if not body.get("stream"):
        return Reply(status=400, error=STREAM_ONLY)
    question = body["messages"][-1]["content"]
    found = tool_messages(body)
    if "暗号是什么" in question and not found:
        arguments = json.dumps({"query": "暗号"}, ensure_ascii=False)
        return Reply(content=None, tool_calls=(("search_memory", arguments),))
    if found:
        return Reply(content="我查到的：" + ("青蛙跳" if "青蛙跳" in found[0] else "没有"))
    return Reply(content="好的，记住了")


async def test_a_stream_only_model_searches_memory_through_the_running_bot():
    async with chatting_bot(ToolLLM(model), said_may_be_logged=True) as running:
        llm, peer = running.llm, running.peer
        await peer.send_event(
            {
                "time": int(time.time()),
                "self_id": 10001,
                "post_type": "meta_event",
                "meta_event_type": "lifecycle",
                "sub_type": "connect",
            }
        )
        answers = []
        for text in ("我的暗号是青蛙跳", "我的暗号是什么"):
            mark = len(peer.calls)
            await peer.send_event(message_payload([text_seg(text)], user_id=51515))
            call = await peer.wait_reply(user_id=51515, group_id=None, after=mark)
            answers.append(sent_text(call))
        assert answers == ["好的，记住了", "我查到的：青蛙跳"]
        streamed = [bool(b.get("stream")) for b in llm.bodies]
        assert streamed[0] is False and all(streamed[1:])  # refused once, streamed since
        # The chat model's calls (the evaluator's offer no tools) carry the same tools.
        chat = [b["tools"] for b in llm.bodies if "tools" in b]
        assert len(chat) >= 3 and all(tools == chat[0] for tools in chat)
    # Learnt once for the process, by whichever model asked first (one line per log handler).
    learnt = [line for line in running.log.splitlines() if "serves only streamed calls" in line]
    assert len([line for line in learnt if "[WARNING]" in line]) == 1, learnt
