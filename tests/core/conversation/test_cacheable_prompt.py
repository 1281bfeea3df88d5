"""The prompt laid out for a provider's prefix cache, through the real engine and database:
what comes before the note of the moment repeats the previous prompt of the chat byte for byte,
while the time and the recalled memory still reach the model with every message."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from memory_core.console.dashboard import prompt_cache_line
from memory_core.context.block import time_key
from memory_core.conversation.engine import ConversationEngine
from memory_core.conversation.prompt import NOTE_CLOSE, NOTE_OPEN
from memory_core.conversation.window import SteppedWindow
from memory_core.distill.memory import ExtractedMemory
from memory_core.models import MemoryTurn
from memory_core.providers.llm import PromptUsage
from tests.core.conversation.test_chat import Outbox, user_turn
from tests.fakes import RecordingModel

START = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)
OLD_FACT = "我的猫叫咪咪，三岁了"


@pytest.fixture
async def memory(memory_factory):
    return await memory_factory()


def ticking(step: timedelta) -> Iterator[datetime]:
    moment = START
    while True:
        moment += step
        yield moment


async def chat(memory, messages: list[tuple[int, int | None]]) -> RecordingModel:
    """Each (user, group) says one message, 40 s after the previous one, with a day-old fact
    in every session for recall to find."""
    for user, group in set(messages):
        day_before = START - timedelta(days=1)
        await memory.parts.writer.add_turn(
            user_turn(OLD_FACT, user=user, group=group, at=day_before)
        )
    model = RecordingModel("好的，我们接着聊。")
    clock = ticking(timedelta(seconds=40))
    now = [START]

    def read() -> datetime:
        return now[0]

    engine = ConversationEngine(parts=memory.parts, chat_model=model, bot_name="小诗", clock=read)
    for i, (user, group) in enumerate(messages):
        # The last turns' vectors land in the background (embed_later); settled, every
        # prompt is built from the same kind of index, whatever the machine's load.
        await memory.parts.writer.settle_embeddings()
        now[0] = next(clock)
        await engine.converse(user_turn(f"第{i}句：猫最近怎么样", user=user, group=group), Outbox())
    return model


async def test_a_chats_system_prompt_is_byte_identical_and_each_prompt_extends_the_last(memory):
    model = await chat(memory, [(1, None)] * 5)  # 8 short-term turns at most: one step
    systems = {p[0]["content"] for p in model.prompts}
    assert len(systems) == 1 and "当前时间：" not in systems.pop()
    for earlier, later in zip(model.prompts, model.prompts[1:], strict=False):
        # Everything but the last message (the note and the message) repeats verbatim.
        assert later[: len(earlier) - 1] == earlier[:-1]
    # The time and the recalled memory are still in every prompt, next to the message.
    for i, prompt in enumerate(model.prompts):
        last = prompt[-1]["content"]
        assert last.index(NOTE_OPEN) < last.index("当前时间：") < last.index(NOTE_CLOSE)
        assert OLD_FACT in last.split(NOTE_CLOSE)[0], i
        assert last.endswith(f"第{i}句：猫最近怎么样")


async def test_the_members_of_a_group_share_the_system_prompt(memory):
    model = await chat(memory, [(1, 100), (2, 100), (1, 100)])
    first, second, third = model.prompts
    assert first[0] == second[0] == third[0]
    assert "QQ 1" not in first[0]["content"] and "QQ 2" not in second[0]["content"]
    assert "群成员小明（QQ 2）" in second[-1]["content"]  # who speaks comes with the message
    assert third[: len(first) - 1] == first[:-1]  # member 1's own turns grow by appending


async def test_a_private_chats_preferences_and_summaries_end_its_system_prompt(memory):
    told = START - timedelta(days=1)
    liked, summary, members = "用户喜欢简短的回答", "用户聊了他的猫咪咪", "用户喜欢长篇大论"
    await memory.parts.keeper.save(
        [
            ExtractedMemory(kind="preferences", content=liked, score=0.9),
            ExtractedMemory(kind="summary", content=summary, score=0.8),
        ],
        1,
        None,
        stated_at=told,
    )
    await memory.parts.keeper.save(
        [ExtractedMemory(kind="preferences", content=members, score=0.9)], 2, 100, stated_at=told
    )
    model = await chat(memory, [(1, None)] * 3 + [(2, 100)])
    private, group = model.prompts[:3], model.prompts[3]
    [system] = {prompt[0]["content"] for prompt in private}  # the same in every call
    assert liked in system and summary in system and "天前" not in system
    for prompt in private:
        note = prompt[-1]["content"]
        assert liked not in note and summary not in note
        assert OLD_FACT in note  # the recalled dialogue is still in the note
    # A group's system prompt is every member's: a member's preference stays in his note.
    assert members not in group[0]["content"] and members in group[-1]["content"]


SECRETS = {1: "我的银行卡密码是四八一五", 2: "我偷偷养了一只刺猬叫团子"}
PRIVATE_SECRET = "私聊里说过下个月辞职"


async def group_chat(memory, members: list[int]) -> RecordingModel:
    """Members of an unshared group 100 speak in turn, 40 s apart; each has a day-old secret
    in the group and member 1 one in his private chat."""
    day_before = START - timedelta(days=1)
    for user, secret in SECRETS.items():
        await memory.parts.writer.add_turn(user_turn(secret, user=user, group=100, at=day_before))
    await memory.parts.writer.add_turn(user_turn(PRIVATE_SECRET, user=1, at=day_before))
    model = RecordingModel("好的，我们接着聊。")
    now = [START]
    engine = ConversationEngine(parts=memory.parts, chat_model=model, clock=lambda: now[0])
    for i, user in enumerate(members):
        now[0] += timedelta(seconds=40)
        text = f"第{i}句：密码和刺猬的事你还记得吗"
        await engine.converse(user_turn(text, user=user, group=100), Outbox())
    return model


async def test_with_chat_group_window_a_groups_members_share_one_window_holding_nobodys_memory(
    memory_factory,
):
    memory = await memory_factory(chat_group_window=True)
    members = [1, 2, 1, 2, 1, 2]
    model = await group_chat(memory, members)
    for earlier, later in zip(model.prompts, model.prompts[1:], strict=False):
        # The next member's prompt repeats the previous member's up to its note.
        assert later[: len(earlier) - 1] == earlier[:-1]
    window = json.dumps(model.prompts[1][1:-1], ensure_ascii=False)
    assert "第0句" in window  # member 1's words in member 2's window
    for user, prompt in zip(members, model.prompts, strict=True):
        text = json.dumps(prompt, ensure_ascii=False)
        shared, note = text.rsplit(NOTE_OPEN, 1)  # (the system prompt names the note too)
        assert not any(secret in shared for secret in SECRETS.values())
        assert SECRETS[3 - user] not in text and PRIVATE_SECRET not in text
        assert SECRETS[user] in note  # the member's own memory still reaches the model


async def test_by_default_each_member_keeps_a_window_of_his_own(memory):
    model = await group_chat(memory, [1, 2, 1, 2])
    second_of_member_2 = model.prompts[3]
    assert "第1句" in json.dumps(second_of_member_2, ensure_ascii=False)
    assert "第0句" not in json.dumps(second_of_member_2, ensure_ascii=False)


def test_the_window_grows_to_its_growth_times_the_setting_before_it_steps() -> None:
    window = SteppedWindow(2, growth=3)
    every = turns(12)
    shown = [
        [t.id for t in window.shown("1", every[max(0, upto - window.capacity) : upto])]
        for upto in range(1, 10)
    ]
    assert shown == [
        [0],
        [0, 1],
        [0, 1, 2],
        [0, 1, 2, 3],
        [0, 1, 2, 3, 4],
        [0, 1, 2, 3, 4, 5],
        [5, 6],  # full at 6 turns: all but the last 2 went at once
        [5, 6, 7],
        [5, 6, 7, 8],
    ]


def turns(n: int) -> list[MemoryTurn]:
    return [
        MemoryTurn(
            id=i,
            message_uuid=f"u{i}",
            session_key="1",
            self_id=None,
            user_id=1,
            group_id=None,
            chat_type="private",
            role="user" if i % 2 == 0 else "assistant",
            content=f"第{i}条",
            sender_name=None,
            message_id=None,
            created_at=START + timedelta(seconds=i),
            score=None,
            expires_at=None,
            token_count=0,
        )
        for i in range(n)
    ]


def test_the_window_grows_to_twice_the_setting_then_drops_its_oldest_half() -> None:
    window = SteppedWindow(3)
    every = turns(20)

    def newest(upto: int) -> list[MemoryTurn]:  # what the tail read gives: at most 6 turns
        return every[max(0, upto - window.capacity) : upto]

    shown = [[t.id for t in window.shown("1", newest(upto))] for upto in range(1, 11)]
    assert shown == [
        [0],
        [0, 1],
        [0, 1, 2],
        [0, 1, 2, 3],
        [0, 1, 2, 3, 4],
        [0, 1, 2, 3, 4, 5],
        [4, 5, 6],  # full: the oldest half went at once, the last 3 stay
        [4, 5, 6, 7],
        [4, 5, 6, 7, 8],
        [4, 5, 6, 7, 8, 9],
    ]
    assert all(len(ids) >= min(3, n + 1) for n, ids in enumerate(shown))
    assert sorted(every[:3], key=time_key) == window.shown("other", every[:3])


class ReportingModel(RecordingModel):
    """Answers like the OpenAI client would after an answer reporting ``usage``."""

    def __init__(self, usage: PromptUsage) -> None:
        super().__init__("好的")
        self.usage = usage

    async def complete(self, messages, **kwargs):  # type: ignore[no-untyped-def]
        self.usage.add({"prompt_tokens": 1000, "prompt_cache_hit_tokens": 750})
        return await super().complete(messages, **kwargs)


async def test_the_days_cached_share_of_prompt_tokens_reaches_memstat(memory):
    usage = PromptUsage()
    engine = ConversationEngine(parts=memory.parts, chat_model=ReportingModel(usage), usage=usage)
    for text in ("你好", "再问一句"):
        await engine.converse(user_turn(text), Outbox())
    stats = await memory.stats()
    assert (stats.prompt_tokens_today, stats.cached_tokens_today) == (2000, 1500)
    assert prompt_cache_line(stats) == "提示词缓存（今日）：75.0%（1500/2000 词元）"
