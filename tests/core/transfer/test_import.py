"""Importing history on a real PostgreSQL: QQ text exports and the memory's own JSON lines,
idempotent, session-isolated, with a round trip export → fresh database → import."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from memory_core import TemporalMemory, open_memory
from memory_core.dialogue.admin_store import PgAdminStore
from memory_core.distill.memory import ExtractedMemory
from memory_core.models import TurnInput
from memory_core.personal import opt_out
from memory_core.recall.options import RecallOptions
from memory_core.settings import MemorySettings
from memory_core.transfer.importer import import_json_lines, import_qq_text
from memory_core.transfer.portable import export_lines
from memory_core.transfer.target import ImportTarget
from tests.conftest import new_database

FIXTURES = Path(__file__).parent / "fixtures"
PRIVATE = ImportTarget(user_id=123456, self_id=10001)
NOW = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)


async def rows(memory: TemporalMemory, sql: str, *args: Any) -> list[asyncpg.Record]:
    async with memory.parts.database.pool.acquire() as conn:
        return list(await conn.fetch(sql, *args))


async def turns_of(memory: TemporalMemory) -> list[tuple[Any, ...]]:
    records = await rows(
        memory,
        "SELECT session_key, role, sender_name, content, created_at, embedding IS NOT NULL AS e,"
        " expires_at FROM dialogues ORDER BY created_at, id",
    )
    return [tuple(r) for r in records]


async def test_private_qq_export_is_stored_with_its_times_and_senders_embedded_and_kept(
    memory_factory,
):
    memory = await memory_factory()
    report = await import_qq_text(memory.parts, FIXTURES / "qq_private.txt", PRIVATE)
    assert (report.read, report.new, report.already, report.system_lines) == (5, 5, 0, 1)
    assert report.problems == [] and dict(report.sessions) == {"123456": 5}
    stored = await turns_of(memory)
    assert stored[0][:5] == (
        "123456",
        "user",
        "小明",
        "你好，我下周三要去杭州出差",
        datetime(2024, 1, 16, 2, 30, 15, tzinfo=timezone.utc),
    )
    assert stored[1][1:3] == ("assistant", "小诗")
    assert all(e and expires is None for *_, e, expires in stored)  # embedded, never expiring
    recalled = await memory.parts.retriever.recall(
        123456, "订单号是多少", options=RecallOptions(top_n=1, window_size=0, now=NOW)
    )
    assert "ORD20240116" in recalled.turns[0].content


async def test_importing_the_same_export_again_stores_nothing_new(memory_factory):
    memory = await memory_factory()
    await import_qq_text(memory.parts, FIXTURES / "qq_private.txt", PRIVATE)
    again = await import_qq_text(memory.parts, FIXTURES / "qq_private.txt", PRIVATE)
    assert (again.read, again.new, again.already) == (5, 0, 5)
    assert len(await turns_of(memory)) == 5


async def test_dry_run_shows_each_turn_and_stores_nothing(memory_factory):
    memory = await memory_factory()
    shown: list[TurnInput] = []
    report = await import_qq_text(
        memory.parts, FIXTURES / "qq_private.txt", PRIVATE, dry_run=True, show=shown.append
    )
    assert report.new == 5 and len(shown) == 5
    assert shown[2].content == "对了，我的订单号是ORD20240116\n帮我记一下"
    assert await turns_of(memory) == []


async def test_dry_run_after_an_import_counts_what_is_already_stored(memory_factory):
    memory = await memory_factory()
    await import_qq_text(memory.parts, FIXTURES / "qq_private.txt", PRIVATE)
    report = await import_qq_text(memory.parts, FIXTURES / "qq_private.txt", PRIVATE, dry_run=True)
    assert (report.new, report.already) == (0, 5)


async def test_group_export_goes_to_each_members_own_session(memory_factory):
    memory = await memory_factory()
    target = ImportTarget(group_id=777, self_id=10001)
    report = await import_qq_text(memory.parts, FIXTURES / "qq_group_utf16.txt", target)
    assert dict(report.sessions) == {"777:222222": 2, "777:333333": 2}
    assert [p.line for p in report.problems] == [21]
    red = await memory.parts.retriever.recall(
        333333, "谁带球", 777, RecallOptions(top_n=5, window_size=0, now=NOW)
    )
    assert {t.session_key for t in red.turns} == {"777:333333"}
    private = await memory.parts.retriever.recall(
        333333, "谁带球", options=RecallOptions(top_n=5, window_size=0, now=NOW)
    )
    assert private.turns == ()


async def test_malformed_export_stores_the_good_lines_and_loses_nothing_stored(memory_factory):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogue(123456, "user", "导入前就存着的一句话", message_id=42)
    report = await import_qq_text(memory.parts, FIXTURES / "qq_malformed.txt", PRIVATE)
    assert [p.line for p in report.problems] == [1, 7]
    contents = [t[3] for t in await turns_of(memory)]
    assert sorted(contents) == sorted(["导入前就存着的一句话", "第一条正常消息", "第二条正常消息"])


async def test_a_file_that_is_no_export_at_all_is_refused_with_the_first_bad_line(
    memory_factory, tmp_path
):
    memory = await memory_factory()
    path = tmp_path / "notes.txt"
    path.write_text("买牛奶\n买面包\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"no message found.*line 1"):
        await import_qq_text(memory.parts, path, PRIVATE)


async def test_an_opted_out_person_is_not_imported(memory_factory):
    memory = await memory_factory()
    await opt_out(memory.parts.database, 123456, None)
    report = await import_qq_text(memory.parts, FIXTURES / "qq_private.txt", PRIVATE)
    assert (report.new, report.refused) == (0, 5)
    assert await turns_of(memory) == []


# ----------------------------------------------------------------------------- JSON lines


@pytest.fixture
async def second_memory(
    pg_server_dsn: str, migrated_template: str, hashing_embedder, tmp_path: Path
) -> AsyncIterator[TemporalMemory]:
    """Another installation: its own fresh database (a copy of the run's migrated template),
    the same embedding model."""
    async with new_database(pg_server_dsn, template=migrated_template) as dsn:
        settings = MemorySettings(memory_dsn=dsn, memory_data_dir=tmp_path / "other")
        memory = await open_memory(settings, embedder=hashing_embedder, maintenance_interval=None)
        try:
            yield memory
        finally:
            await memory.aclose()


async def seed_session(memory: TemporalMemory) -> None:
    """A private chat with turns, a scored exchange, a fact that replaced an older one (history)
    and a summary; and another person's chat, which a one-session export leaves out."""
    start = datetime(2026, 11, 1, 8, tzinfo=timezone.utc)
    ids = []
    for n, (role, text) in enumerate(
        [
            ("user", "我住在北京，在一家医院当护士"),
            ("assistant", "护士很辛苦，注意休息。"),
            ("user", "我上个月搬到上海了"),
            ("assistant", "上海欢迎你！"),
        ]
    ):
        outcome = await memory.parts.writer.add_dialogue(
            123456, role, text, message_id=100 + n, self_id=10001,
            created_at=start + timedelta(minutes=n),
            sender_name="小明" if role == "user" else "小诗",
            raw_segments=[{"type": "text", "data": {"text": text}}],
        )  # fmt: skip
        assert outcome.turn is not None
        ids.append(outcome.turn.id)
    async with memory.parts.database.pool.acquire() as conn:
        await conn.execute(
            "UPDATE dialogues SET score = 85, expires_at = $2 WHERE id = $1",
            ids[1],
            start + timedelta(days=90),
        )
    old = await memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content="用户住在北京", category="personal_info")],
        123456, source_turn_ids=ids[:1], stated_at=start,
    )  # fmt: skip
    await memory.parts.keeper.save(
        [ExtractedMemory(kind="facts", content="用户住在上海", replaces=old.ids),
         ExtractedMemory(kind="summary", content="用户从北京搬到上海", key_topics=("搬家",))],
        123456, source_turn_ids=ids[2:], stated_at=start + timedelta(minutes=2),
    )  # fmt: skip
    await memory.parts.writer.add_dialogue(999, "user", "别人的私聊：我住在广州", message_id=7)
    await memory.parts.keeper.save([ExtractedMemory(kind="facts", content="用户住在广州")], 999)


async def exported(memory: TemporalMemory, sessions: list[str] | None) -> list[dict[str, Any]]:
    return [line async for line in export_lines(memory.parts, sessions)]


def numbered(lines: list[dict[str, Any]]) -> list[tuple[int, Any]]:
    """As a file would give them: through JSON text, numbered from 1."""
    return [(n, json.loads(json.dumps(line))) for n, line in enumerate(lines, start=1)]


def comparable(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines less what differs between databases by nature (row ids, export time)."""
    kept = []
    for line in lines[1:]:
        line = {k: v for k, v in line.items() if k not in ("id", "superseded_by")}
        kept.append(line)
    return kept


async def test_export_of_one_session_holds_its_turns_and_memories_with_their_sources(
    memory_factory,
):
    memory = await memory_factory()
    await seed_session(memory)
    lines = await exported(memory, ["123456"])
    header, *rest = lines
    assert header["type"] == "header" and header["sessions"] == ["123456"]
    turns = [line for line in rest if line["type"] == "turn"]
    memories = [line for line in rest if line["type"] == "memory"]
    assert turns[0]["content"] == "我住在北京，在一家医院当护士"
    assert len(turns) == 4 and all(t["user_id"] == 123456 for t in turns)
    expected = {"用户住在北京", "用户住在上海", "用户从北京搬到上海"}
    assert {m["content"] for m in memories} == expected
    beijing = next(m for m in memories if m["content"] == "用户住在北京")
    shanghai = next(m for m in memories if m["content"] == "用户住在上海")
    assert beijing["valid_until"] is not None and beijing["superseded_by"] == shanghai["id"]
    assert beijing["sources"] == [turns[0]["message_uuid"]]
    assert turns[1]["score"] == 85 and turns[1]["expires_at"] is not None


TIME_FIELDS = ("exported_at", "created_at", "expires_at", "first_seen", "last_confirmed",
               "last_accessed_at", "valid_until")  # fmt: skip


async def test_export_times_are_written_in_memory_timezone_and_read_back_as_the_same_moment(
    memory_factory,
):
    memory = await memory_factory(memory_timezone="Asia/Shanghai")
    await seed_session(memory)
    lines = await exported(memory, ["123456"])

    times = [line[k] for line in lines for k in TIME_FIELDS if line.get(k) is not None]
    assert len(times) > 10 and all(t.endswith("+08:00") for t in times), times
    first = next(line for line in lines if line["type"] == "turn")
    stored = (await memory.parts.database.store(PgAdminStore).user_turns(123456))[0]
    assert datetime.fromisoformat(first["created_at"]) == stored.created_at


async def test_round_trip_to_a_fresh_database_gives_the_same_rows_and_the_same_recall(
    memory_factory, second_memory
):
    source = await memory_factory()
    await seed_session(source)
    lines = await exported(source, None)
    report = await import_json_lines(second_memory.parts, numbered(lines))
    assert report.problems == []
    assert (report.new, report.memories_new) == (5, 4)
    assert comparable(await exported(second_memory, None)) == comparable(lines)
    # History still points at its successor in the new database.
    [(successor,)] = await rows(
        second_memory,
        "SELECT s.content FROM distilled_memories h JOIN distilled_memories s "
        "ON s.id = h.superseded_by WHERE h.content = '用户住在北京'",
    )
    assert successor == "用户住在上海"
    for query in ("我现在住在哪里", "护士"):
        before = await source.parts.retriever.recall(123456, query, options=RecallOptions(now=NOW))
        after = await second_memory.parts.retriever.recall(
            123456, query, options=RecallOptions(now=NOW)
        )
        assert [t.message_uuid for t in after.turns] == [t.message_uuid for t in before.turns]
        facts_before = await source.parts.keeper.recall(123456, None, query, now=NOW)
        facts_after = await second_memory.parts.keeper.recall(123456, None, query, now=NOW)
        assert [h.memory.content for h in facts_after] == [h.memory.content for h in facts_before]
        assert facts_after  # the memories were embedded on import


async def test_importing_an_export_twice_adds_nothing(memory_factory, second_memory):
    source = await memory_factory()
    await seed_session(source)
    lines = numbered(await exported(source, None))
    await import_json_lines(second_memory.parts, lines)
    again = await import_json_lines(second_memory.parts, lines)
    assert (again.new, again.already, again.memories_new, again.memories_already) == (0, 5, 0, 4)


async def test_bad_json_lines_are_reported_by_number_and_the_rest_imported(memory_factory):
    memory = await memory_factory()
    good = {"user_id": 1, "role": "user", "content": "没有时间也没有编号的一行"}
    lines = [
        (1, good),
        (2, ValueError("not JSON: Expecting value")),
        (3, {"type": "turn", "user_id": "x", "role": "user", "content": "坏"}),
        (4, {"type": "memory", "kind": "facts", "user_id": 1, "content": "缺少时间"}),
        (5, {"type": "spaceship"}),
        (6, {"type": "header", "format": "another-tool"}),
    ]
    report = await import_json_lines(memory.parts, lines)
    assert [p.line for p in report.problems] == [2, 3, 4, 5, 6]
    assert report.new == 1
    # A line without a source id gets a stable one: the same file again adds nothing.
    again = await import_json_lines(memory.parts, [(1, good)])
    assert (again.new, again.already) == (0, 1)
