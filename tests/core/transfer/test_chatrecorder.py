"""Importing nonebot-plugin-chatrecorder's message table: a SQLite file and a PostgreSQL
database, each in one of the two layouts the import reads (hand-written samples)."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone
from pathlib import Path

import asyncpg
import pytest

from memory_core.transfer.importer import import_chatrecorder

FIXTURES = Path(__file__).parent / "fixtures"


def sqlite_file(tmp_path: Path, fixture: str) -> str:
    path = tmp_path / "db.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.executescript((FIXTURES / fixture).read_text(encoding="utf-8"))
    return str(path)


async def stored(memory) -> list[tuple[str, str, str, datetime, int | None]]:
    async with memory.parts.database.pool.acquire() as conn:
        rows = await conn.fetch(
            "SELECT session_key, role, content, created_at, qq_message_id FROM dialogues "
            "ORDER BY created_at, id"
        )
    return [tuple(r) for r in rows]


def utc(hour: int, minute: int, second: int) -> datetime:
    return datetime(2024, 1, 16, hour, minute, second, tzinfo=timezone.utc)


async def test_sqlite_uninfo_layout_goes_to_the_live_bots_sessions_once(memory_factory, tmp_path):
    memory = await memory_factory()
    source = sqlite_file(tmp_path, "chatrecorder_uninfo.sql")
    report = await import_chatrecorder(memory.parts, source)
    assert report.problems == [] and report.without_text == 1
    assert await stored(memory) == [
        ("123456", "user", "我下周三去杭州出差", utc(2, 30, 15), 1001),
        ("123456", "assistant", "好的，记得带伞。", utc(2, 30, 20), 1002),
        ("777:222222", "user", "周六下午三点打球", utc(3, 0, 0), 2001),
        ("777:333333", "user", "我带两筒球", utc(3, 1, 0), 2002),
        ("777:333333", "assistant", "收到，小红带球。", utc(3, 1, 5), 2003),  # the last speaker's
    ]
    again = await import_chatrecorder(memory.parts, source)
    assert (again.new, again.already) == (0, 5)


async def test_a_message_the_live_bot_stored_too_is_not_stored_twice(memory_factory, tmp_path):
    memory = await memory_factory()
    await memory.parts.writer.add_dialogue(
        123456, "user", "我下周三去杭州出差", message_id=1001, self_id=10001
    )
    report = await import_chatrecorder(
        memory.parts, sqlite_file(tmp_path, "chatrecorder_uninfo.sql")
    )
    assert (report.new, report.already) == (4, 1)


async def test_postgres_session_orm_layout_is_read_and_a_bot_message_before_anyone_is_reported(
    memory_factory, fresh_dsn
):
    memory = await memory_factory()
    conn = await asyncpg.connect(fresh_dsn)  # the chatrecorder tables beside the memory's
    try:
        await conn.execute((FIXTURES / "chatrecorder_session_orm.sql").read_text("utf-8"))
    finally:
        await conn.close()
    report = await import_chatrecorder(memory.parts, fresh_dsn)
    assert [(p.line, p.reason) for p in report.problems] == [
        (3, "no user this message can be filed under")
    ]
    assert [row[:3] for row in await stored(memory)] == [
        ("123456", "user", "我下周三去杭州出差"),
        ("123456", "assistant", "好的，记得带伞。"),
        ("777:333333", "user", "我带两筒球"),
        ("777:333333", "assistant", "收到，小红带球。"),
    ]


async def test_a_database_without_chatrecorder_tables_is_refused_with_the_way_out(
    memory_factory, tmp_path
):
    memory = await memory_factory()
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER)")
    with pytest.raises(ValueError, match="write JSON lines from your database instead"):
        await import_chatrecorder(memory.parts, str(path))
    (tmp_path / "text.db").write_text("not a database", encoding="utf-8")
    with pytest.raises(ValueError, match="not a readable SQLite database"):
        await import_chatrecorder(memory.parts, str(tmp_path / "text.db"))
