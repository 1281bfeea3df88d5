"""All SQL of ``turn_pictures`` (migrations 014, 017), and what reading pictures reads of the
dialogue (a turn's text is rewritten by ``dialogue``: ``TurnWriter.rewrite``)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ..accounts import account_of_key, key_account
from ..storage.opt_outs import EVERYONE, EVERYWHERE, not_opted_out
from ..storage.pg import PgStore, rows_affected

# What was read of a picture before, by the client's digest name or by the bytes' hash: the
# newest answer that holds (a picture skipped for the budget is tried again).
_KNOWN = """
SELECT status, text, description, sha256 FROM turn_pictures
WHERE {key} = $1 AND status IN ('read', 'refused')
ORDER BY read_at DESC LIMIT 1
"""
SQL_KNOWN_BY_FILE_KEY = _KNOWN.format(key="file_key")
SQL_KNOWN_BY_SHA256 = _KNOWN.format(key="sha256")

# Whether the person's pictures in this chat may be read at all (``storage.opt_outs``): asked
# before anything is fetched, since the turn itself is stored only after.
SQL_MAY_READ = f"""
SELECT NOT EXISTS (
    SELECT 1 FROM memory_opt_outs
    WHERE user_id IN ($1, {EVERYONE}) AND chat IN ('{EVERYWHERE}', $2)
)
"""

# A reading of a turn's picture. The turn may have been deleted (撤回) while its picture was
# read: then nothing is written. A picture tried again (a retry round) counts one more attempt.
SQL_RECORD = """
INSERT INTO turn_pictures (turn_id, position, file_key, sha256, status, text, description)
SELECT $1, $2, $3, $4, $5, $6, $7 WHERE EXISTS (SELECT 1 FROM dialogues WHERE id = $1)
ON CONFLICT (turn_id, position) DO UPDATE
SET file_key = EXCLUDED.file_key, sha256 = EXCLUDED.sha256, status = EXCLUDED.status,
    text = EXCLUDED.text, description = EXCLUDED.description, read_at = now(),
    attempts = turn_pictures.attempts + 1
"""

# Pictures to try again ('skipped': the budget, a full queue, a timeout), fewer than $1 times
# tried: of turns still kept ($2: seconds back the retry window reaches), of people who have not
# opted out since; at most $3 of them, the newest turns first. A 撤回 took its rows with it.
SQL_RETRY_DUE = f"""
SELECT d.id, d.self_id, d.session_key, d.raw_segments::text AS raw_segments, p.position
FROM turn_pictures p JOIN dialogues d ON d.id = p.turn_id
WHERE p.status = 'skipped' AND p.attempts < $1
  AND d.created_at >= now() - make_interval(secs => $2)
  AND (d.expires_at IS NULL OR d.expires_at > now())
  AND {not_opted_out("d")}
ORDER BY d.created_at DESC, d.id DESC, p.position
LIMIT $3
"""

# What each picture of a turn was read as, so far.
SQL_TURN_READINGS = """
SELECT position, status, text, description FROM turn_pictures WHERE turn_id = $1
"""

SQL_TURN_TEXT = "SELECT content, sender_name, created_at FROM dialogues WHERE id = $1"

# The latest turns of a chat that carried a photo or screenshot (not a sticker), newest first,
# for "刚才那张图": the session index walked backwards, each row's segments looked at.
_LATEST_PICTURES = """
SELECT id, created_at FROM dialogues
WHERE {scope} AND created_at <= $2 AND (expires_at IS NULL OR expires_at > $2)
  AND jsonb_path_exists(raw_segments, '$[*] ? (@.type == "image"
      && !exists(@.data.sub_type ? (@ == 1 || @ == "1"))
      && !exists(@.data.summary ? (@ == "[动画表情]")))')
ORDER BY created_at DESC, id DESC LIMIT $3
"""
SQL_LATEST_PICTURES = _LATEST_PICTURES.format(scope="session_key = $1")
# A shared group's pictures are every member's of that group in the same QQ account's memory
# ($4: the account's namespace, memory_core.accounts).
SQL_GROUP_LATEST_PICTURES = _LATEST_PICTURES.format(
    scope=f"group_id = $1::bigint AND {key_account()} = $4::text"
)


@dataclass(frozen=True)
class KnownPicture:
    """What was read of a picture before."""

    status: str
    text: str
    description: str
    sha256: bytes | None


@dataclass(frozen=True)
class PictureRecord:
    """One picture of a stored turn, as ``turn_pictures`` keeps it."""

    position: int
    file_key: str | None
    sha256: bytes | None
    status: str
    text: str
    description: str = ""


@dataclass(frozen=True)
class RetryTurn:
    """A stored turn with pictures to try again: its segments, and which of its pictures."""

    turn_id: int
    self_id: int | None
    session_key: str
    segments: list[dict[str, object]] | None
    positions: tuple[int, ...]


@dataclass(frozen=True)
class StoredReading:
    """What one picture of a turn was read as."""

    status: str
    text: str
    description: str


@dataclass(frozen=True)
class TurnText:
    content: str
    sender_name: str | None
    created_at: datetime


class PgPictureStore(PgStore):
    """The pictures of stored turns."""

    async def known(self, *, file_key: str | None, sha256: bytes | None) -> KnownPicture | None:
        """What was read of this picture before (by its digest name, else its hash)."""
        async with self._connection() as conn:
            for sql, key in ((SQL_KNOWN_BY_FILE_KEY, file_key), (SQL_KNOWN_BY_SHA256, sha256)):
                if key is None:
                    continue
                record = await conn.fetchrow(sql, key)
                if record is not None:
                    return KnownPicture(
                        record["status"], record["text"], record["description"], record["sha256"]
                    )
        return None

    async def may_read(self, user_id: int, chat: str) -> bool:
        """Whether ``user_id`` has not opted out of memory in ``chat`` (or everywhere)."""
        async with self._connection() as conn:
            return bool(await conn.fetchval(SQL_MAY_READ, user_id, chat))

    async def record(self, turn_id: int, pictures: Sequence[PictureRecord]) -> int:
        """Keep the readings of a turn's pictures; how many were kept (none when the turn is
        gone)."""
        async with self._transaction() as conn:
            kept = 0
            for p in pictures:
                status = await conn.execute(
                    SQL_RECORD,
                    turn_id,
                    p.position,
                    p.file_key,
                    p.sha256,
                    p.status,
                    p.text,
                    p.description,
                )
                kept += rows_affected(status)
        return kept

    async def retry_due(self, max_attempts: int, window: float, limit: int) -> list[RetryTurn]:
        """The turns with pictures to try again (at most ``limit`` pictures), newest first."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_RETRY_DUE, max_attempts, window, limit)
        turns: dict[int, RetryTurn] = {}
        for r in records:
            earlier = turns.get(r["id"])
            if earlier is not None:
                positions = (*earlier.positions, r["position"])
                turns[r["id"]] = dataclasses.replace(earlier, positions=positions)
                continue
            segments = json.loads(r["raw_segments"]) if r["raw_segments"] else None
            turns[r["id"]] = RetryTurn(
                r["id"], r["self_id"], r["session_key"], segments, (r["position"],)
            )
        return list(turns.values())

    async def readings(self, turn_id: int) -> dict[int, StoredReading]:
        """What each picture of the turn was read as, by position."""
        async with self._connection() as conn:
            records = await conn.fetch(SQL_TURN_READINGS, turn_id)
        return {
            r["position"]: StoredReading(r["status"], r["text"], r["description"]) for r in records
        }

    async def turn_text(self, turn_id: int) -> TurnText | None:
        async with self._connection() as conn:
            record = await conn.fetchrow(SQL_TURN_TEXT, turn_id)
        if record is None:
            return None
        return TurnText(record["content"], record["sender_name"], record["created_at"])

    async def latest_pictures(
        self, session_key: str, shared_group: int | None, now: datetime, limit: int
    ) -> list[tuple[int, datetime]]:
        """``(id, created_at)`` of the chat's latest turns carrying a photo or screenshot,
        newest first: the session's, or the whole group's when it is shared."""
        async with self._connection() as conn:
            if shared_group is None:
                records = await conn.fetch(SQL_LATEST_PICTURES, session_key, now, limit)
            else:
                account = account_of_key(session_key)
                records = await conn.fetch(
                    SQL_GROUP_LATEST_PICTURES, shared_group, now, limit, account
                )
        return [(r["id"], r["created_at"]) for r in records]
