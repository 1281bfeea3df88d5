"""A person's own data: the listing, deleting own items, the export (real PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

from memory_core.conversation.engine import Outcome
from memory_core.distill.memory import ExtractedMemory
from memory_core.models import TurnInput
from memory_core.personal import (
    discard_export,
    export_person,
    forget_memories,
    known_about,
    opt_in,
    opt_out,
)
from tests.core.conversation.test_chat import (
    GENERAL_QUESTION,
    Outbox,
    engine_for,
    user_turn,
)
from tests.fakes import RecordingModel

T0 = datetime(2026, 11, 20, 4, tzinfo=timezone.utc)
ME, OTHER, GROUP = 1, 2, 300


async def test_export_holds_my_turns_memories_and_cached_answers_of_every_chat_only(
    memory_factory, tmp_path
):
    memory = await memory_factory(answer_cache_enabled=True)
    for user, group, content in ((ME, None, "我的狗叫旺财"), (ME, GROUP, "我的猫叫咪咪"),
                                 (OTHER, GROUP, "我的鱼叫泡泡")):  # fmt: skip
        await memory.parts.writer.add_turn(TurnInput(user_id=user, group_id=group, role="user",
                                        content=content, created_at=T0))  # fmt: skip
    await memory.parts.writer.add_turn(
        TurnInput(user_id=ME, role="assistant", content="好的", created_at=T0 + timedelta(1))
    )
    await memory.parts.keeper.save([ExtractedMemory(kind="facts", content="用户养狗")], ME, None)
    await memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content="用户养鱼")], OTHER, GROUP
    )
    assert await memory.parts.answer_cache.store("如何配置Nginx反向代理", "答案", ME, GROUP, now=T0)

    export = await export_person(memory.parts.database, ME, tz=memory.parts.tz)
    data = json.loads((await export.write(tmp_path)).read_text(encoding="utf-8"))

    assert [(t["chat"], t["role"], t["content"]) for t in data["turns"]] == [
        ("private", "user", "我的狗叫旺财"),
        (f"group:{GROUP}", "user", "我的猫叫咪咪"),
        ("private", "assistant", "好的"),
    ]
    # In MEMORY_TIMEZONE (Asia/Shanghai here), as the person reads times in every reply.
    assert data["turns"][0]["time"] == "2026-11-20T12:00:00+08:00"
    assert data["exported_at"].endswith("+08:00")
    assert data["memories"][0]["first_seen"].endswith("+08:00")
    assert [(m["kind"], m["content"]) for m in data["memories"]] == [("facts", "用户养狗")]
    assert [(c["chat"], c["answer"]) for c in data["cached_answers"]] == [
        (f"group:{GROUP}", "答案")
    ]
    assert (await export_person(memory.parts.database, 999, tz=memory.parts.tz)).empty


async def test_forget_memories_deletes_only_my_rows_in_this_chat(memory_factory):
    memory = await memory_factory()
    await memory.parts.keeper.save([ExtractedMemory(kind="facts", content="用户养狗")], ME, None)
    await memory.parts.keeper.save([ExtractedMemory(kind="facts", content="用户养猫")], ME, GROUP)
    await memory.parts.keeper.save([ExtractedMemory(kind="facts", content="用户养鱼")], OTHER, None)
    mine = await known_about(memory.parts.keeper, ME, None)
    group_row = (await known_about(memory.parts.keeper, ME, GROUP))[0]
    other_row = (await known_about(memory.parts.keeper, OTHER, None))[0]

    # Another chat's row and another person's row are out of reach from here.
    ids = [mine[0].id, group_row.id, other_row.id]
    forgotten = await forget_memories(memory.parts.database, memory.parts.spool, ME, None, ids)

    assert forgotten.facts == 1
    assert await known_about(memory.parts.keeper, ME, None) == []
    assert [m.content for m in await known_about(memory.parts.keeper, ME, GROUP)] == ["用户养猫"]
    assert [m.content for m in await known_about(memory.parts.keeper, OTHER, None)] == ["用户养鱼"]


async def test_an_opt_out_holds_for_single_writes_and_for_spooled_turns_written_later(
    memory_factory,
):
    memory = await memory_factory()
    assert await opt_out(memory.parts.database, ME, GROUP)
    refused = await memory.parts.writer.add_turn(
        TurnInput(user_id=ME, group_id=GROUP, role="user", content="a")
    )
    assert refused.turn is None and refused.opted_out and not refused.duplicate
    # A spool flush and an import write through add_dialogues: held to the opt-out too.
    written = await memory.parts.writer.add_dialogues(
        [
            TurnInput(user_id=ME, group_id=GROUP, role="user", content="spooled", created_at=T0),
            TurnInput(user_id=ME, role="user", content="private", created_at=T0),
            TurnInput(user_id=OTHER, group_id=GROUP, role="user", content="other", created_at=T0),
        ]
    )
    assert written == 2
    assert [
        t.content
        for t in (await export_person(memory.parts.database, ME, tz=memory.parts.tz)).turns
    ] == ["private"]
    assert await opt_in(memory.parts.database, ME, GROUP)
    kept = await memory.parts.writer.add_turn(
        TurnInput(user_id=ME, group_id=GROUP, role="user", content="b")
    )
    assert kept.turn is not None


async def test_an_opted_out_person_is_answered_but_their_answers_are_not_cached(memory_factory):
    memory = await memory_factory(answer_cache_enabled=True)
    await opt_out(memory.parts.database, 11, None)
    model, outbox = RecordingModel("容器共享宿主机内核。"), Outbox()
    engine = engine_for(memory, model)
    for _ in range(2):
        result = await engine.converse(user_turn(GENERAL_QUESTION, user=11), outbox)
        assert result.outcome is Outcome.REPLIED and not result.from_cache
    assert len(model.prompts) == 2  # nothing cached to serve the second time
    assert (await export_person(memory.parts.database, 11, tz=memory.parts.tz)).empty
    # Someone who did not opt out is cached as before.
    for _ in range(2):
        await engine.converse(user_turn(GENERAL_QUESTION, user=12), outbox)
    assert len(model.prompts) == 3


async def test_two_exports_of_one_person_at_once_get_a_file_each(memory_factory, tmp_path):
    memory = await memory_factory()
    await memory.parts.writer.add_turn(
        TurnInput(user_id=ME, role="user", content="我的狗叫旺财", created_at=T0)
    )
    export = await export_person(memory.parts.database, ME, tz=memory.parts.tz)
    first, second = await asyncio.gather(export.write(tmp_path), export.write(tmp_path))
    assert first != second and first.name == second.name == f"temporal-memory-{ME}.json"
    # One request removing its file once sent leaves the other's whole.
    discard_export(first)
    assert not first.parent.exists()
    data = json.loads(second.read_text(encoding="utf-8"))
    assert [t["content"] for t in data["turns"]] == ["我的狗叫旺财"]
