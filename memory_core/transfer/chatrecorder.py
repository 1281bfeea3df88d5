"""Reading the message table of nonebot-plugin-chatrecorder (SQLite file or PostgreSQL).

Two layouts are known, told apart by the session table present:

* chatrecorder ≥ 0.7 keeps sessions in nonebot-plugin-uninfo's
  ``nonebot_plugin_uninfo_sessionmodel`` (``self_id``, ``adapter``, ``scene_type`` 0 = private
  / 1 = group, ``scene_id``, ``user_id``);
* chatrecorder 0.5–0.6 in nonebot-plugin-session-orm's
  ``nonebot_plugin_session_orm_sessionmodel`` (``bot_id``, ``bot_type``, ``level`` 1 = private
  / 2 = group, ``id1`` user, ``id2`` group).

Both keep the messages in ``nonebot_plugin_chatrecorder_messagerecord``: ``time`` (UTC, without
zone), ``type`` (``message`` received, ``message_sent`` sent by the bot), ``message_id`` and
``plain_text`` (text segments only; a message of images alone has none and is skipped). Only
OneBot v11 private and group chats are read. The layouts were taken from the plugins' model and
migration code; an older layout (chatrecorder on nonebot-plugin-datastore) is refused with a
pointer to the JSON-lines route in ``docs/import-export.md``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import asyncpg

from ..models import Role, TurnInput
from .qq_text import LineProblem

MESSAGES = "nonebot_plugin_chatrecorder_messagerecord"
UNINFO_SESSIONS = "nonebot_plugin_uninfo_sessionmodel"
SESSION_ORM_SESSIONS = "nonebot_plugin_session_orm_sessionmodel"
ONEBOT_V11 = "OneBot V11"

# One shape for both layouts: record id, time, type, message id, text, bot, group, user.
SQL_UNINFO_MESSAGES = f"""
SELECT m.id, m.time, m.type, m.message_id, m.plain_text, s.self_id,
       CASE WHEN s.scene_type = 1 THEN s.scene_id END AS group_id,
       CASE WHEN s.scene_type = 0 THEN s.scene_id ELSE s.user_id END AS user_id
FROM {MESSAGES} m JOIN {UNINFO_SESSIONS} s ON s.id = m.session_persist_id
WHERE s.adapter = '{ONEBOT_V11}' AND s.scene_type IN (0, 1)
ORDER BY m.time, m.id
"""
SQL_SESSION_ORM_MESSAGES = f"""
SELECT m.id, m.time, m.type, m.message_id, m.plain_text, s.bot_id AS self_id,
       CASE WHEN s.level = 2 THEN s.id2 END AS group_id, s.id1 AS user_id
FROM {MESSAGES} m JOIN {SESSION_ORM_SESSIONS} s ON s.id = m.session_persist_id
WHERE s.bot_type = '{ONEBOT_V11}' AND s.level IN (1, 2)
ORDER BY m.time, m.id
"""
SQL_SQLITE_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"
SQL_PG_TABLES = """
SELECT table_name FROM information_schema.tables
WHERE table_schema = ANY(current_schemas(false))
"""

UNSUPPORTED = (
    "no nonebot-plugin-chatrecorder tables found that this import reads (it needs {messages} "
    "with {uninfo} or {orm}); write JSON lines from your database instead (docs/import-export.md, "
    "'jsonl')"
)


@dataclass(frozen=True)
class RecordedMessage:
    record_id: int
    time: datetime  # UTC
    sent: bool  # by the bot
    message_id: int | None
    text: str
    self_id: int | None
    group_id: int | None
    user_id: int | None


def _int(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def _utc(value: Any) -> datetime:
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment


def _query(tables: set[str]) -> str:
    if MESSAGES in tables and UNINFO_SESSIONS in tables:
        return SQL_UNINFO_MESSAGES
    if MESSAGES in tables and SESSION_ORM_SESSIONS in tables:
        return SQL_SESSION_ORM_MESSAGES
    raise ValueError(
        UNSUPPORTED.format(messages=MESSAGES, uninfo=UNINFO_SESSIONS, orm=SESSION_ORM_SESSIONS)
    )


def _message(row: Sequence[Any]) -> RecordedMessage:
    record_id, time, kind, message_id, text, self_id, group_id, user_id = row
    return RecordedMessage(
        record_id=int(record_id),
        time=_utc(time),
        sent=kind == "message_sent",
        message_id=_int(message_id),
        text=text or "",
        self_id=_int(self_id),
        group_id=_int(group_id),
        user_id=_int(user_id),
    )


@dataclass
class Records:
    """The messages read, oldest first, and the records that could not be read (by id)."""

    messages: list[RecordedMessage] = field(default_factory=list)
    problems: list[LineProblem] = field(default_factory=list)

    def add(self, row: Sequence[Any]) -> None:
        try:
            self.messages.append(_message(row))
        except (ValueError, TypeError, OverflowError) as exc:  # one bad value: this record only
            self.problems.append(LineProblem(_int(row[0]) or 0, f"unreadable record: {exc}"))


def _read_sqlite(path: Path) -> Records:
    if not path.is_file():
        raise ValueError(f"{path}: no such file")
    records = Records()
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
            tables = {name for (name,) in conn.execute(SQL_SQLITE_TABLES)}
            for row in conn.execute(_query(tables)):
                records.add(row)
    except sqlite3.DatabaseError as exc:
        raise ValueError(f"{path}: not a readable SQLite database ({exc})") from exc
    return records


async def _read_postgres(dsn: str) -> Records:
    try:
        conn = await asyncpg.connect(dsn)
    except (OSError, asyncpg.PostgresError) as exc:
        raise ValueError(f"cannot connect to the chatrecorder database: {exc}") from exc
    try:
        tables = {r["table_name"] for r in await conn.fetch(SQL_PG_TABLES)}
        records = Records()
        for row in await conn.fetch(_query(tables)):
            records.add(tuple(row))
        return records
    except asyncpg.PostgresError as exc:
        raise ValueError(f"reading the chatrecorder tables failed: {exc}") from exc
    finally:
        await conn.close()


async def read_chatrecorder(source: str) -> Records:
    """The OneBot v11 messages of a chatrecorder database, oldest first, and the records that
    could not be read: ``source`` is a PostgreSQL DSN (``postgresql://…``) or the path of its
    SQLite file."""
    if source.startswith(("postgresql://", "postgres://")):
        return await _read_postgres(source)
    return await asyncio.to_thread(_read_sqlite, Path(source))


@dataclass
class RecordRouter:
    """Turns recorded messages into turns, in the sessions the live bot would have used; the
    bot's messages in a group go to the member who spoke last there (as in a QQ text import).
    ``problems`` are numbered by record id."""

    problems: list[LineProblem]
    without_text: int = 0

    def turns(self, messages: Sequence[RecordedMessage]) -> Iterator[tuple[int, TurnInput]]:
        last_speaker: dict[int, int] = {}
        for message in messages:
            if not message.text.strip():
                self.without_text += 1
                continue
            user_id = message.user_id
            role: Role = "assistant" if message.sent else "user"
            if message.group_id is not None:
                if message.sent:
                    user_id = last_speaker.get(message.group_id)
                elif user_id is not None:
                    last_speaker[message.group_id] = user_id
            if user_id is None:
                self.problems.append(
                    LineProblem(message.record_id, "no user this message can be filed under")
                )
                continue
            yield (
                message.record_id,
                TurnInput(
                    user_id=user_id,
                    group_id=message.group_id,
                    self_id=message.self_id,
                    role=role,
                    content=message.text,
                    message_id=message.message_id,
                    created_at=message.time,
                ),
            )
