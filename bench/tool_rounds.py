"""How many chat-model calls a reply takes with the memory tools on (counted, not timed).

A 10-message private chat and a 3-member group chat (12 messages) go through the real
``ConversationEngine`` on an embedded PostgreSQL, with a day of earlier history in each
session, and the real ``OpenAIChatModel`` over an in-process HTTP transport whose stand-in
model behaves in one of four ways:

* ``no-tools``: CHAT_TOOLS=off, the baseline (one call per reply);
* ``when-asked``: calls ``search_memory`` once when the message asks about the past
  ("还记得", every other message here), then answers;
* ``always``: calls ``search_memory`` once for every message, then answers;
* ``endless``: calls a tool every time it may (bounded by the engine: two rounds, then a
  call that must answer).

For each it prints the model calls per reply (p50, p90, max), the extra calls, the mean size
of the first prompt's messages of a reply (the injected memory block's budget is halved with
the tools offered; it only shows when recall fills more than half of MEMORY_MAX_TOKENS) and the
size of the tool definitions every call carries.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from datetime import timedelta
from typing import Any

import httpx

from bench.common import T0, RandomQueryEmbedder, bench_data_dir, machine_line
from bench.prompt_prefix import GROUP_ID, MEMBERS, PRIVATE_USER, TOPICS, history
from memory_core import open_memory
from memory_core.conversation.citation import Citation
from memory_core.conversation.engine import ConversationEngine, Delivery
from memory_core.errors import LLMError
from memory_core.models import TurnInput
from memory_core.providers.llm import OpenAIChatModel
from memory_core.providers.openai_api import OpenAIEndpoint
from memory_core.settings import MemorySettings

BEHAVIOURS = ("no-tools", "when-asked", "always", "endless")


class StandIn:
    """The stand-in model behind the transport; counts the calls of the current reply."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.calls = 0
        self.first_prompt_chars: list[int] = []
        self.tools_chars = 0

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.calls += 1
        messages = body["messages"]
        tool_results = [m for m in messages if m["role"] == "tool"]
        if not tool_results:
            self.first_prompt_chars.append(len(json.dumps(messages, ensure_ascii=False)))
        if body.get("tools"):
            self.tools_chars = len(json.dumps(body["tools"], ensure_ascii=False))
        offered = bool(body.get("tools")) and body.get("tool_choice") != "none"
        question = messages[-1]["content"]
        wants = {
            "no-tools": False,
            "when-asked": "还记得" in question and not tool_results,
            "always": not tool_results,
            "endless": True,
        }[self.behaviour]
        message: dict[str, Any] = {"role": "assistant", "content": "好的，我想起来了。"}
        if offered and wants:
            arguments = json.dumps({"query": question[-12:]}, ensure_ascii=False)
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{self.calls}",
                        "type": "function",
                        "function": {"name": "search_memory", "arguments": arguments},
                    }
                ],
            }
        usage = {"prompt_tokens": 500, "completion_tokens": 20, "total_tokens": 520}
        return httpx.Response(200, json={"choices": [{"message": message}], "usage": usage})


def percentile(values: list[int], share: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


async def measure(behaviour: str, messages: int) -> str:
    with bench_data_dir("tools") as data_dir:
        settings = MemorySettings.model_validate(
            {
                "memory_data_dir": data_dir,
                "evaluator_enabled": False,
                "chat_tools": "off" if behaviour == "no-tools" else "auto",
                "chat_slow_notice_after": 0,
            }
        )
        memory = await open_memory(
            settings, embedder=RandomQueryEmbedder(384), maintenance_interval=None
        )
        stand_in = StandIn(behaviour)
        client = httpx.AsyncClient(
            transport=httpx.MockTransport(stand_in.handle), base_url="http://stand-in/v1"
        )
        model = OpenAIChatModel(
            OpenAIEndpoint(client, label="chat model", error=LLMError, max_retries=0),
            "stand-in",
            deadline=settings.llm_reply_deadline,
            tools=settings.chat_tools,
        )
        clock = [T0 + timedelta(days=1)]
        engine = ConversationEngine(
            parts=memory.parts,
            chat_model=model,
            bot_name="小忆",
            clock=lambda: clock[0],
        )

        async def send(text: str, *, cited: Citation | None = None) -> Delivery:
            return Delivery(text)

        per_reply: list[int] = []
        try:
            await memory.parts.writer.add_dialogues(history(PRIVATE_USER, None, "阿华", T0))
            for user_id, name in MEMBERS:
                await memory.parts.writer.add_dialogues(history(user_id, GROUP_ID, name, T0))
            chats: list[tuple[int, int | None, str]] = [(PRIVATE_USER, None, "阿华")] * messages
            chats += [(MEMBERS[i % 3][0], GROUP_ID, MEMBERS[i % 3][1]) for i in range(12)]
            for i, (user_id, group_id, name) in enumerate(chats):
                clock[0] += timedelta(seconds=40)
                topic = TOPICS[i % len(TOPICS)]
                text = f"你还记得{topic}吗？" if i % 2 == 0 else f"今天想聊聊{topic}"
                stand_in.calls = 0
                turn = TurnInput(user_id, "user", text, group_id, 10001, name, 3000 + i)
                await engine.converse(turn, send)
                per_reply.append(stand_in.calls)
        finally:
            await model.aclose()
            await memory.aclose()
        extra = sum(c - 1 for c in per_reply)
        return (
            f"{behaviour:>10}: model calls per reply p50 {percentile(per_reply, 0.5)}, "
            f"p90 {percentile(per_reply, 0.9)}, max {max(per_reply)}; "
            f"{extra} extra calls over {len(per_reply)} replies; mean first prompt "
            f"{statistics.mean(stand_in.first_prompt_chars):.0f} chars, tool definitions "
            f"{stand_in.tools_chars} chars"
        )


async def run(messages: int) -> None:
    print(f"== model calls per reply with memory tools ({machine_line()})")
    for behaviour in BEHAVIOURS:
        print(await measure(behaviour, messages), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=10)
    args = parser.parse_args(argv)
    asyncio.run(run(args.messages))


if __name__ == "__main__":
    main()
