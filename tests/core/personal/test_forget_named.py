"""A person's delete of named memories takes everything it names (real PostgreSQL): the facts,
the turns they came from, the bot's replies repeating them, and for a word every turn, echo,
summary and cached answer of that chat holding it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from memory_core.distill.memory import ExtractedMemory
from memory_core.models import TurnInput
from memory_core.personal import Named, export_person, forget_named, known_about, preview_forget

T0 = datetime(2026, 11, 20, 4, tzinfo=timezone.utc)
ME, OTHER, GROUP = 1, 2, 300
CHAT = [  # (role, text) of ME's private chat, in order
    ("user", "我对花生过敏"),
    ("assistant", "好的，记住了"),
    ("user", "今天吃了花生酱面包"),
    ("assistant", "花生酱很好吃"),
    ("user", "我住在杭州"),
    ("assistant", "杭州不错"),
    ("user", "推荐点零食"),
    ("assistant", "你对花生过敏要注意，推荐海苔"),
]


async def seeded(memory_factory):
    """ME's private chat (CHAT) with what was distilled from it, a cached answer, and rows of
    other people and other chats that must survive; the turn ids by text."""
    memory = await memory_factory(answer_cache_enabled=True)
    ids = {}
    for n, (role, text) in enumerate(CHAT):
        stored = await memory.parts.writer.add_turn(
            TurnInput(user_id=ME, role=role, content=text, created_at=T0 + timedelta(minutes=n))
        )
        ids[text] = stored.turn.id
    await memory.parts.writer.add_turn(
        TurnInput(user_id=ME, group_id=GROUP, role="user", content="群里说花生")
    )
    await memory.parts.writer.add_turn(
        TurnInput(user_id=OTHER, role="user", content="我也对花生过敏")
    )
    save = memory.parts.keeper.save
    await save([ExtractedMemory("facts", "用户对花生过敏", source_turn_ids=(ids["我对花生过敏"],))],
               ME, source_turn_ids=list(ids.values()), stated_at=T0)  # fmt: skip
    await save([ExtractedMemory("facts", "用户住在杭州", source_turn_ids=(ids["我住在杭州"],))],
               ME, source_turn_ids=list(ids.values()), stated_at=T0)  # fmt: skip
    await save([ExtractedMemory("preferences", "喜欢面包", evidence=("今天吃了花生酱面包",),
                                source_turn_ids=(ids["今天吃了花生酱面包"],))],
               ME, source_turn_ids=list(ids.values()), stated_at=T0)  # fmt: skip
    await save([ExtractedMemory("summary", "用户说自己对花生过敏，住在杭州。")],
               ME, source_turn_ids=list(ids.values())[:6], stated_at=T0)  # fmt: skip
    await save([ExtractedMemory("facts", "用户在群里聊花生")], ME, GROUP, stated_at=T0)
    await save([ExtractedMemory("facts", "用户对花生过敏")], OTHER, stated_at=T0)
    assert await memory.parts.answer_cache.store(
        "零食推荐", "你对花生过敏，推荐海苔", ME, now=T0 + timedelta(minutes=9)
    )
    return memory, ids


async def private_texts(memory, tmp_path) -> list[str]:
    """Every text of ME's private chat in the export (turns, memories, cached answers)."""
    data = json.loads(
        (
            await (await export_person(memory.parts.database, ME, tz=memory.parts.tz)).write(
                tmp_path
            )
        ).read_text("utf-8")
    )
    parts = (("turns", "content"), ("memories", "content"), ("cached_answers", "answer"))
    return [
        text
        for part, field in parts
        for item in data[part]
        if item["chat"] == "private"
        for text in (item[field], item.get("question", ""))
    ]


async def all_rows_holding(memory, word: str) -> list[tuple[str, str]]:
    async with memory.parts.database.pool.acquire() as conn:  # test-only
        rows = await conn.fetch(
            """
            SELECT 'turn' AS t, session_key FROM dialogues WHERE content LIKE '%' || $1 || '%'
            UNION ALL SELECT kind, session_key FROM distilled_memories
            WHERE content || array_to_string(evidence, ' ') LIKE '%' || $1 || '%'
            UNION ALL SELECT 'cached', coalesce(group_id, 0)::text FROM answer_cache
            WHERE question || answer LIKE '%' || $1 || '%'
            """,
            word,
        )
    return sorted((r[0], r[1]) for r in rows)


async def test_forgetting_a_word_leaves_no_turn_echo_memory_or_export_line_holding_it(
    memory_factory, tmp_path
):
    memory, _ = await seeded(memory_factory)

    forgotten = await forget_named(
        memory.parts.database, memory.parts.spool, Named(ME, None, word="花生")
    )

    # The two turns saying it, the reply to the first and both bot turns holding it.
    assert (forgotten.dialogues, forgotten.bot_replies) == (5, 3)
    assert (forgotten.facts, forgotten.preferences, forgotten.summaries) == (1, 1, 1)
    assert forgotten.cached_answers == 1
    assert await all_rows_holding(memory, "花生") == [
        ("facts", "2"), ("facts", f"{GROUP}:1"), ("turn", "2"), ("turn", f"{GROUP}:1")
    ]  # fmt: skip
    assert not [t for t in await private_texts(memory, tmp_path) if "花生" in t]
    left = [
        t.content for t in await memory.parts.retriever.recent_turns(ME, None, limit=20, since=T0)
    ]
    assert left == ["我住在杭州", "杭州不错", "推荐点零食"]
    assert [m.content for m in await known_about(memory.parts.keeper, ME, None)] == ["用户住在杭州"]


async def test_forgetting_a_fact_takes_its_turn_the_reply_and_later_echoes_only(memory_factory):
    memory, ids = await seeded(memory_factory)
    [fact] = [
        m for m in await known_about(memory.parts.keeper, ME, None) if m.content == "用户对花生过敏"
    ]
    named = Named(ME, None, (fact.id,))

    preview = await preview_forget(memory.parts.database, named)
    assert [t.content for t in preview.turns] == [
        "我对花生过敏", "好的，记住了", "你对花生过敏要注意，推荐海苔"
    ]  # fmt: skip
    assert (preview.count("facts"), preview.count("summary"), preview.bot_replies) == (1, 1, 2)

    forgotten = await forget_named(memory.parts.database, memory.parts.spool, named)

    assert (forgotten.dialogues, forgotten.bot_replies, forgotten.facts) == (3, 2, 1)
    assert forgotten.summaries == 1  # drawn from the batch the deleted turn was in
    left = [
        t.content for t in await memory.parts.retriever.recent_turns(ME, None, limit=20, since=T0)
    ]
    assert left == ["今天吃了花生酱面包", "花生酱很好吃", "我住在杭州", "杭州不错", "推荐点零食"]
    assert sorted(m.content for m in await known_about(memory.parts.keeper, ME, None)) == [
        "喜欢面包", "用户住在杭州"
    ]  # fmt: skip
    assert ids["我住在杭州"] in next(
        m.source_turn_ids
        for m in await known_about(memory.parts.keeper, ME, None)
        if m.kind == "facts"
    )


async def test_another_chats_and_another_persons_rows_are_out_of_reach(memory_factory):
    memory, _ = await seeded(memory_factory)
    [group_fact] = await known_about(memory.parts.keeper, ME, GROUP)
    [other_fact] = await known_about(memory.parts.keeper, OTHER, None)
    forgotten = await forget_named(
        memory.parts.database, memory.parts.spool, Named(ME, None, (group_fact.id, other_fact.id))
    )
    assert forgotten.total == 0
    assert [m.content for m in await known_about(memory.parts.keeper, ME, GROUP)] == [
        "用户在群里聊花生"
    ]
    assert [m.content for m in await known_about(memory.parts.keeper, OTHER, None)] == [
        "用户对花生过敏"
    ]
