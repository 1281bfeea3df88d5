"""How much of consecutive chat prompts a provider's prefix cache can reuse.

A 10-message private chat and a 3-member group chat (12 messages, each member addressing the
bot in turn) go through the real ``ConversationEngine`` and ``OpenAIChatModel`` on an embedded
PostgreSQL, with a day of earlier history in each session so recall has something to bring
back. A stand-in endpoint behind an in-process HTTP transport keeps every request body and
answers with ``--reply-chars`` characters (80 by default, a short chat reply). A prompt is the
request's tool definitions (offered with CHAT_TOOLS on or auto; ``--set CHAT_TOOLS=off`` for
none), which a provider's template puts first, then its ``messages``. For each prompt after the
first it prints the share of it that is a common prefix

* with the previous prompt of the chat (what the issue measured), and
* with the best earlier prompt of the chat (what a provider's cache, which keeps every prefix
  it has seen for a while, can reuse; in a group each member has their own session),

and the share a cache billing whole 64-token blocks of the prefix would count as cached
(DeepSeek's unit; OpenAI's is 128 tokens past the first 1,024, which prompts this short never
reach). Embeddings are random (``bench.common.RandomQueryEmbedder``): the recalled memories
change from message to message, as real ones do. ``--where`` prints, for each prompt, where it
first differs from the previous one (message, role, offset in its content); ``--distilled``
gives every session two preferences, a fact and a summary (as extraction would have made).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import httpx

from bench.common import (
    T0,
    RandomQueryEmbedder,
    add_set_option,
    bench_data_dir,
    machine_line,
    setting_overrides,
)
from memory_core import open_memory
from memory_core.conversation.citation import Citation
from memory_core.conversation.engine import ConversationEngine, Delivery
from memory_core.distill.memory import ExtractedMemory
from memory_core.errors import LLMError
from memory_core.lang.tokens import TokenCounter
from memory_core.models import TurnInput
from memory_core.providers.llm import OpenAIChatModel
from memory_core.providers.openai_api import OpenAIEndpoint
from memory_core.settings import MemorySettings

BLOCK_TOKENS = 64
PRIVATE_USER = 20_001
GROUP_ID = 600_001
MEMBERS = ((30_001, "小明"), (30_002, "小红"), (30_003, "阿强"))
REPLY = "好的，我记下了。这件事听起来挺重要的，我们可以一步一步来想想办法。"
TOPICS = ("周末去爬山", "新买的咖啡机", "下周的考试", "猫又生病了", "想换工作", "北京的天气")


class RecordingEndpoint:
    """The stand-in chat endpoint behind ``OpenAIChatModel``: keeps every request body as a
    provider gets it (the tool definitions, then the messages) and answers with a fixed text."""

    def __init__(self, reply_chars: int) -> None:
        self.prompts: list[tuple[int, dict[str, Any]]] = []
        self.chat = 0  # which chat the next prompts belong to
        self.reply_chars = reply_chars

    def handle(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.prompts.append((self.chat, body))
        n = len(self.prompts)
        text = (f"第{n}个回答：" + REPLY * (1 + self.reply_chars // len(REPLY)))[: self.reply_chars]
        message = {"role": "assistant", "content": text}
        usage = {"prompt_tokens": 500, "completion_tokens": 20, "total_tokens": 520}
        return httpx.Response(200, json={"choices": [{"message": message}], "usage": usage})


def serialised(body: Mapping[str, Any]) -> str:
    """The request's prompt as a provider's template lays it out: the tool definitions (when
    offered) before the messages."""
    tools = json.dumps(body.get("tools") or [], ensure_ascii=False)
    return tools + json.dumps(body["messages"], ensure_ascii=False)


def first_difference(earlier: Mapping[str, Any], later: Mapping[str, Any]) -> str:
    """Where ``later``'s messages first differ from ``earlier``'s: the message's index and
    role, the offset in its content and a few characters either side of it."""
    old, new = earlier["messages"], later["messages"]
    for index, message in enumerate(new):
        if index >= len(old):
            return f"message {index} ({message['role']}) is new"
        if old[index] == message:
            continue
        a, b = str(old[index].get("content")), str(message.get("content"))
        at = common_prefix(a, b)
        if old[index]["role"] != message["role"]:
            return f"message {index}: role {old[index]['role']} -> {message['role']}"
        return (
            f"message {index} ({message['role']}) at char {at}/{len(b)}: "
            f"{b[max(0, at - 12) : at]!r} | {a[at : at + 16]!r} -> {b[at : at + 16]!r}"
        )
    return "identical"


def common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def shares(prompts: list[str], counter: TokenCounter) -> tuple[float, float, float]:
    """Mean prefix shares over the prompts after the first: (previous, best earlier, billed)."""
    previous, best, billed = [], [], []
    for i in range(1, len(prompts)):
        text = prompts[i]
        with_previous = common_prefix(prompts[i - 1], text)
        with_best = max(common_prefix(earlier, text) for earlier in prompts[:i])
        previous.append(with_previous / len(text))
        best.append(with_best / len(text))
        cached = counter.count(text[:with_best]) // BLOCK_TOKENS * BLOCK_TOKENS
        billed.append(cached / counter.count(text))
    return statistics.mean(previous), statistics.mean(best), statistics.mean(billed)


DISTILLED = (
    ExtractedMemory(kind="preferences", content="用户喜欢简短、直接的回答", score=0.9),
    ExtractedMemory(kind="preferences", content="用户不喜欢被催促", score=0.7),
    ExtractedMemory(kind="facts", content="用户养了一只猫", score=0.9),
    ExtractedMemory(kind="summary", content="用户聊了周末爬山、咖啡机和下周的考试", score=0.6),
)


def history(user_id: int, group_id: int | None, name: str, start: datetime) -> list[TurnInput]:
    """A day-old exchange per topic, for recall to find."""
    turns = []
    for i, topic in enumerate(TOPICS):
        at = start + timedelta(minutes=i)
        turns.append(
            TurnInput(user_id, "user", f"我跟你说，{topic}", group_id, 10001, name, created_at=at)
        )
        turns.append(
            TurnInput(
                user_id,
                "assistant",
                f"听起来不错，{topic}要注意什么呢？",
                group_id,
                10001,
                "小忆",
                created_at=at + timedelta(seconds=5),
            )
        )
    return turns


async def run(
    messages: int, reply_chars: int, where: bool, distilled: bool, overrides: dict[str, str]
) -> None:
    print(f"== prompt prefix shares ({machine_line()}), replies of {reply_chars} characters")
    if overrides:
        print(f"settings: {overrides}")
    with bench_data_dir("prefix") as data_dir:
        settings = MemorySettings.model_validate(
            {
                "memory_data_dir": data_dir,
                "evaluator_enabled": False,
                "chat_slow_notice_after": 0,
                **overrides,
            }
        )
        memory = await open_memory(
            settings, embedder=RandomQueryEmbedder(384), maintenance_interval=None
        )
        endpoint = RecordingEndpoint(reply_chars)
        client = httpx.AsyncClient(
            transport=httpx.MockTransport(endpoint.handle), base_url="http://stand-in/v1"
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

        try:
            day_before = T0
            await memory.parts.writer.add_dialogues(history(PRIVATE_USER, None, "阿华", day_before))
            for user_id, name in MEMBERS:
                await memory.parts.writer.add_dialogues(
                    history(user_id, GROUP_ID, name, day_before)
                )
            if distilled:
                for user_id, group_id in (
                    (PRIVATE_USER, None),
                    *((u, GROUP_ID) for u, _ in MEMBERS),
                ):
                    await memory.parts.keeper.save(
                        DISTILLED, user_id, group_id, stated_at=day_before
                    )
            for i in range(messages):
                clock[0] += timedelta(seconds=40)
                text = f"第{i + 1}句：说说{TOPICS[i % len(TOPICS)]}吧，你还记得吗？"
                turn = TurnInput(PRIVATE_USER, "user", text, None, 10001, "阿华", 1000 + i)
                await engine.converse(turn, send)
            endpoint.chat = 1
            for i in range(messages + 2):
                clock[0] += timedelta(seconds=40)
                user_id, name = MEMBERS[i % len(MEMBERS)]
                text = f"第{i + 1}句：{name}想问{TOPICS[i % len(TOPICS)]}的事"
                turn = TurnInput(user_id, "user", text, GROUP_ID, 10001, name, 2000 + i)
                await engine.converse(turn, send, group_name="爬山小队")
        finally:
            await model.aclose()
            await memory.aclose()
        tools = endpoint.prompts[0][1].get("tools")
        print(
            f"tool definitions: {len(json.dumps(tools, ensure_ascii=False)) if tools else 0} chars"
        )
        for chat, label in ((0, f"private, {messages} messages"), (1, "group, 3 members")):
            bodies = [body for c, body in endpoint.prompts if c == chat]
            prompts = [serialised(body) for body in bodies]
            previous, best, billed = shares(prompts, memory.parts.token_counter)
            tokens = statistics.mean(memory.parts.token_counter.count(p) for p in prompts)
            print(
                f"{label}: prefix share vs previous prompt {previous:.2f}, "
                f"vs best earlier prompt {best:.2f}, billed as cached ({BLOCK_TOKENS}-token "
                f"blocks) {billed:.2f}; mean prompt {statistics.mean(map(len, prompts)):.0f} "
                f"chars, {tokens:.0f} tokens"
            )
            if where:
                for i in range(1, len(bodies)):
                    share = common_prefix(prompts[i - 1], prompts[i]) / len(prompts[i])
                    print(f"  {i}: {share:.2f} {first_difference(bodies[i - 1], bodies[i])}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument(
        "--reply-chars", type=int, default=80, help="length of the stand-in model's replies"
    )
    parser.add_argument(
        "--where", action="store_true", help="print where each prompt first differs"
    )
    parser.add_argument(
        "--distilled",
        action="store_true",
        help="give every session two preferences, a fact and a summary",
    )
    add_set_option(parser)
    args = parser.parse_args(argv)
    overrides = setting_overrides(args.set)
    asyncio.run(run(args.messages, args.reply_chars, args.where, args.distilled, overrides))


if __name__ == "__main__":
    main()
