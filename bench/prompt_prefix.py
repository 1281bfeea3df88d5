"""How much of consecutive chat prompts a provider's prefix cache can reuse.

A 10-message private chat and a 3-member group chat (12 messages, each member addressing the
bot in turn) go through the real ``ConversationEngine`` on an embedded PostgreSQL, with a day of
earlier history in each session so recall has something to bring back. A recording stand-in chat
model keeps every ``messages`` array it is sent and answers with ``--reply-chars`` characters
(80 by default, a short chat reply). For each prompt after the first it prints the
share of its serialised JSON that is a common prefix

* with the previous prompt of the chat (what the issue measured), and
* with the best earlier prompt of the chat (what a provider's cache, which keeps every prefix
  it has seen for a while, can reuse; in a group each member has their own session),

and the share a cache billing whole 64-token blocks of the prefix would count as cached
(DeepSeek's unit; OpenAI's is 128 tokens past the first 1,024, which prompts this short never
reach). Embeddings are random (``bench.common.RandomQueryEmbedder``): the recalled memories
change from message to message, as real ones do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from bench.common import (
    T0,
    RandomQueryEmbedder,
    add_set_option,
    bench_data_dir,
    machine_line,
    setting_overrides,
)
from memory_core import open_memory
from memory_core.conversation.engine import ConversationEngine, Delivery
from memory_core.lang.tokens import TokenCounter
from memory_core.models import TurnInput
from memory_core.settings import MemorySettings

BLOCK_TOKENS = 64
PRIVATE_USER = 20_001
GROUP_ID = 600_001
MEMBERS = ((30_001, "小明"), (30_002, "小红"), (30_003, "阿强"))
REPLY = "好的，我记下了。这件事听起来挺重要的，我们可以一步一步来想想办法。"
TOPICS = ("周末去爬山", "新买的咖啡机", "下周的考试", "猫又生病了", "想换工作", "北京的天气")


class RecordingModel:
    """A ChatModel that records every prompt and answers with a fixed sentence."""

    def __init__(self, reply_chars: int) -> None:
        self.prompts: list[tuple[int, list[dict[str, str]]]] = []
        self.chat = 0  # which chat the next prompts belong to
        self.reply_chars = reply_chars

    async def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> str:
        self.prompts.append((self.chat, [dict(m) for m in messages]))
        n = len(self.prompts)
        return (f"第{n}个回答：" + REPLY * (1 + self.reply_chars // len(REPLY)))[: self.reply_chars]

    async def aclose(self) -> None:
        return None


def serialised(messages: list[dict[str, str]]) -> str:
    return json.dumps(messages, ensure_ascii=False)


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


async def run(messages: int, reply_chars: int, overrides: dict[str, str]) -> None:
    print(f"== prompt prefix shares ({machine_line()}), replies of {reply_chars} characters")
    if overrides:
        print(f"settings: {overrides}")
    with bench_data_dir("prefix") as data_dir:
        settings = MemorySettings.model_validate(
            {"memory_data_dir": data_dir, "evaluator_enabled": False, **overrides}
        )
        memory = await open_memory(
            settings, embedder=RandomQueryEmbedder(384), maintenance_interval=None
        )
        model = RecordingModel(reply_chars)
        clock = [T0 + timedelta(days=1)]
        engine = ConversationEngine(
            parts=memory.parts,
            writer=memory,
            chat_model=model,
            bot_name="小忆",
            clock=lambda: clock[0],
        )

        async def send(text: str) -> Delivery:
            return Delivery(text)

        try:
            day_before = T0
            await memory.add_dialogues(history(PRIVATE_USER, None, "阿华", day_before))
            for user_id, name in MEMBERS:
                await memory.add_dialogues(history(user_id, GROUP_ID, name, day_before))
            for i in range(messages):
                clock[0] += timedelta(seconds=40)
                text = f"第{i + 1}句：说说{TOPICS[i % len(TOPICS)]}吧，你还记得吗？"
                turn = TurnInput(PRIVATE_USER, "user", text, None, 10001, "阿华", 1000 + i)
                await engine.converse(turn, send)
            model.chat = 1
            for i in range(messages + 2):
                clock[0] += timedelta(seconds=40)
                user_id, name = MEMBERS[i % len(MEMBERS)]
                text = f"第{i + 1}句：{name}想问{TOPICS[i % len(TOPICS)]}的事"
                turn = TurnInput(user_id, "user", text, GROUP_ID, 10001, name, 2000 + i)
                await engine.converse(turn, send, group_name="爬山小队")
        finally:
            await memory.aclose()
        for chat, label in ((0, f"private, {messages} messages"), (1, "group, 3 members")):
            prompts = [serialised(m) for c, m in model.prompts if c == chat]
            previous, best, billed = shares(prompts, memory.token_counter)
            print(
                f"{label}: prefix share vs previous prompt {previous:.2f}, "
                f"vs best earlier prompt {best:.2f}, billed as cached ({BLOCK_TOKENS}-token "
                f"blocks) {billed:.2f}; mean prompt {statistics.mean(map(len, prompts)):.0f} chars"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument(
        "--reply-chars", type=int, default=80, help="length of the stand-in model's replies"
    )
    add_set_option(parser)
    args = parser.parse_args(argv)
    asyncio.run(run(args.messages, args.reply_chars, setting_overrides(args.set)))


if __name__ == "__main__":
    main()
