"""A recalled (撤回) QQ message is forgotten with everything that came from it, in its own chat
only: the turn, the bot's reply, distilled memories drawn from them, the sender's cached answers."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from memory_core.distill.memory import ExtractedMemory
from memory_core.models import RecalledMessage, TurnInput

BOT = 10001
T0 = datetime(2024, 1, 16, 10, 0, tzinfo=timezone.utc)
SECRET = "我的银行卡密码是778899，别告诉别人"
ECHO = "好的，记住啦：你的银行卡密码是778899。"


def turn(user_id, group_id, role, content, message_id, at):
    return TurnInput(
        user_id=user_id,
        group_id=group_id,
        role=role,
        content=content,
        message_id=message_id,
        self_id=BOT,
        created_at=at,
    )


async def rows_mentioning(memory, needle: str) -> dict[str, int]:
    async with memory.parts.database.pool.acquire() as conn:
        return {
            table: await conn.fetchval(
                f"SELECT count(*) FROM {table} WHERE {column} LIKE '%' || $1 || '%'", needle
            )
            for table, column in (
                ("dialogues", "content"),
                ("distilled_memories", "content"),
                ("answer_cache", "answer"),
            )
        }


async def test_recall_forgets_the_exchange_its_facts_and_cached_answers(memory_factory):
    memory = await memory_factory(answer_cache_enabled=True)
    secret = (await memory.parts.writer.add_turn(turn(1, None, "user", SECRET, 501, T0))).turn
    echo = (await memory.parts.writer.add_turn(turn(1, None, "assistant", ECHO, 502, T0))).turn
    later = T0 + timedelta(minutes=1)
    await memory.parts.writer.add_turn(turn(1, None, "user", "今天天气不错", 503, later))
    await memory.parts.writer.add_turn(turn(1, None, "assistant", "是的，适合散步", 504, later))
    # The same message id in another user's private chat and in a group: other chats.
    await memory.parts.writer.add_turn(turn(2, None, "user", "别人的消息 778899", 501, T0))
    await memory.parts.writer.add_turn(turn(1, 900, "user", "群里的消息 778899", 501, T0))
    await memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content="用户的银行卡密码是778899")],
        1,
        source_turn_ids=[secret.id, echo.id],
        stated_at=T0,
    )
    await memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content="用户喜欢散步")], 1, stated_at=later
    )
    assert await memory.parts.answer_cache.store(
        "银行卡密码是多少", "778899", 1, now=T0 + timedelta(seconds=30)
    )
    before = await rows_mentioning(memory, "778899")
    assert before == {"dialogues": 4, "distilled_memories": 1, "answer_cache": 1}

    forgotten = await memory.parts.forgetting.delete_message(RecalledMessage(BOT, 501, user_id=1))

    assert forgotten is not None
    assert (forgotten.dialogues, forgotten.facts, forgotten.cached_answers) == (2, 1, 1)
    after = await rows_mentioning(memory, "778899")
    assert after == {"dialogues": 2, "distilled_memories": 0, "answer_cache": 0}
    now = T0 + timedelta(hours=1)
    recalled = await memory.parts.retriever.get_contextual_memory(1, "银行卡密码", top_n=5, now=now)
    assert all("778899" not in t.content for t in recalled)
    # Other chats' turns with the same message id, and the rest of this chat, are untouched.
    assert [
        t.content for t in await memory.parts.retriever.recent_turns(2, None, limit=9, since=T0)
    ] == ["别人的消息 778899"]
    assert [
        t.content for t in await memory.parts.retriever.recent_turns(1, 900, limit=9, since=T0)
    ] == ["群里的消息 778899"]
    [kept] = await memory.parts.keeper.recall_by_type(1, None, "facts", now=now)
    assert kept.content == "用户喜欢散步"


async def test_group_recall_deletes_only_in_the_group_it_names(memory_factory):
    memory = await memory_factory()
    await memory.parts.writer.add_turn(turn(1, 900, "user", "群900的话", 77, T0))
    await memory.parts.writer.add_turn(turn(1, 900, "assistant", "群900的回复", 78, T0))
    await memory.parts.writer.add_turn(turn(1, 901, "user", "群901的话", 77, T0))
    await memory.parts.writer.add_turn(turn(1, None, "user", "私聊的话", 77, T0))
    forgotten = await memory.parts.forgetting.delete_message(
        RecalledMessage(BOT, 77, group_id=900, user_id=1)
    )
    assert forgotten is not None and forgotten.dialogues == 2
    assert [
        t.content for t in await memory.parts.retriever.recent_turns(1, 901, limit=9, since=T0)
    ] == ["群901的话"]
    assert [
        t.content for t in await memory.parts.retriever.recent_turns(1, None, limit=9, since=T0)
    ] == ["私聊的话"]


async def test_recalling_the_bots_own_reply_deletes_just_that_reply(memory_factory):
    memory = await memory_factory()
    await memory.parts.writer.add_turn(turn(1, None, "user", "问题", 80, T0))
    await memory.parts.writer.add_turn(turn(1, None, "assistant", "答错了", 81, T0))
    await memory.parts.writer.add_turn(
        turn(1, None, "user", "下一个问题", 82, T0 + timedelta(seconds=1))
    )
    await memory.parts.writer.add_turn(
        turn(1, None, "assistant", "下一个回答", 83, T0 + timedelta(seconds=1))
    )
    forgotten = await memory.parts.forgetting.delete_message(RecalledMessage(BOT, 81, user_id=BOT))
    assert forgotten is not None and forgotten.dialogues == 1
    contents = [
        t.content for t in await memory.parts.retriever.recent_turns(1, None, limit=9, since=T0)
    ]
    assert contents == ["问题", "下一个问题", "下一个回答"]


async def test_a_recall_also_takes_the_bots_later_replies_that_repeat_the_withdrawn_text(
    memory_factory,
):
    memory = await memory_factory()
    said = [
        ("user", SECRET),
        ("assistant", "好的。"),  # the reply to it: goes by place
        ("user", "再确认一下"),
        ("assistant", "你的银行卡密码是778899，我记着呢"),  # a later reply repeating it
        ("user", "我的卡丢了怎么办"),
        ("assistant", "银行卡丢了要尽快挂失"),  # shares only 银行卡: stays
        ("user", "今天天气不错"),
        ("assistant", "是的，适合散步"),
    ]
    for n, (role, content) in enumerate(said):
        await memory.parts.writer.add_turn(
            turn(1, None, role, content, 700 + n, T0 + timedelta(seconds=n))
        )

    forgotten = await memory.parts.forgetting.delete_message(RecalledMessage(BOT, 700, user_id=1))

    assert forgotten is not None
    assert (forgotten.dialogues, forgotten.bot_replies) == (3, 2)
    assert (await rows_mentioning(memory, "778899"))["dialogues"] == 0
    left = [
        t.content for t in await memory.parts.retriever.recent_turns(1, None, limit=20, since=T0)
    ]
    assert left == [
        "再确认一下",
        "我的卡丢了怎么办",
        "银行卡丢了要尽快挂失",
        "今天天气不错",
        "是的，适合散步",
    ]
    recalled = await memory.parts.retriever.get_contextual_memory(
        1, "银行卡密码", top_n=5, now=T0 + timedelta(hours=1)
    )
    assert all("778899" not in t.content for t in recalled)


async def test_two_members_messages_sharing_an_id_are_both_stored(memory_factory):
    """NapCat's and go-cqhttp's message ids are 32-bit hashes: B's message may reuse A's id."""
    memory = await memory_factory()
    first = await memory.parts.writer.add_turn(turn(1, 900, "user", "甲说的话", 77, T0))
    second = await memory.parts.writer.add_turn(turn(2, 900, "user", "乙说的话", 77, T0))
    assert first.turn is not None and second.turn is not None and not second.duplicate
    # The same member's message delivered twice is still one turn.
    assert (await memory.parts.writer.add_turn(turn(2, 900, "user", "乙说的话", 77, T0))).duplicate


async def test_a_recall_never_deletes_another_members_turn_with_the_same_id(memory_factory):
    memory = await memory_factory()
    await memory.parts.writer.add_turn(turn(1, 900, "user", "甲说的话", 77, T0))
    await memory.parts.writer.add_turn(turn(1, 900, "assistant", "给甲的回复", 78, T0))
    later = T0 + timedelta(seconds=5)
    await memory.parts.writer.add_turn(turn(2, 900, "user", "乙说的话", 77, later))
    await memory.parts.writer.add_turn(turn(2, 900, "assistant", "给乙的回复", 79, later))
    # The bot's own message in the group with that id too: not 乙's either.
    await memory.parts.writer.add_turn(turn(3, 900, "assistant", "机器人的话", 77, later))
    forgotten = await memory.parts.forgetting.delete_message(
        RecalledMessage(BOT, 77, group_id=900, user_id=2)
    )
    assert forgotten is not None and forgotten.dialogues == 2
    left = [t.content for t in await memory.parts.retriever.recent_turns(1, 900, limit=9, since=T0)]
    assert left == ["甲说的话", "给甲的回复"]
    assert [
        t.content for t in await memory.parts.retriever.recent_turns(3, 900, limit=9, since=T0)
    ] == ["机器人的话"]


async def test_the_bots_recall_in_private_never_deletes_a_persons_turn_with_that_id(
    memory_factory,
):
    memory = await memory_factory()
    await memory.parts.writer.add_turn(turn(1, None, "user", "甲的问题", 90, T0))
    await memory.parts.writer.add_turn(turn(1, None, "assistant", "给甲的回答", 91, T0))
    await memory.parts.writer.add_turn(turn(2, None, "user", "乙的消息", 91, T0))
    forgotten = await memory.parts.forgetting.delete_message(RecalledMessage(BOT, 91, user_id=BOT))
    assert forgotten is not None and forgotten.dialogues == 1
    assert [
        t.content for t in await memory.parts.retriever.recent_turns(2, None, limit=9, since=T0)
    ] == ["乙的消息"]
