"""A local file of what arrived while the database was unreachable: turns to store, and QQ
messages recalled (withdrawn) by their senders, whose turns must then be deleted."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from ..models import RecalledMessage, TurnInput

log = logging.getLogger(__name__)


@dataclass
class SpoolContents:
    turns: list[TurnInput] = field(default_factory=list)
    recalled: list[RecalledMessage] = field(default_factory=list)
    lines: int = 0  # lines read, unreadable ones included


def _encode(turn: TurnInput) -> str:
    data = dataclasses.asdict(turn)
    if turn.created_at is not None:
        data["created_at"] = turn.created_at.isoformat()
    return json.dumps(data, ensure_ascii=False)


def _decode(line: str) -> TurnInput | RecalledMessage:
    data = json.loads(line)
    if "recalled" in data:
        return RecalledMessage(**data["recalled"])
    if data.get("created_at"):
        data["created_at"] = datetime.fromisoformat(data["created_at"])
    return TurnInput(**data)


class TurnSpool:
    """Append-only JSON lines; every turn carries its message_uuid and deleting a recalled
    message twice deletes nothing more, so re-flushing is harmless."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = asyncio.Lock()

    async def append(self, turn: TurnInput) -> None:
        async with self._lock:
            await asyncio.to_thread(self._append_sync, _encode(turn))

    async def append_recall(self, recalled: RecalledMessage) -> None:
        line = json.dumps({"recalled": dataclasses.asdict(recalled)})
        async with self._lock:
            await asyncio.to_thread(self._append_sync, line)

    def _append_sync(self, line: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def pending(self) -> int:
        """How many entries wait in the spool (counts lines; cheap for a spool's size)."""
        if not self.path.exists():
            return 0
        with self.path.open(encoding="utf-8") as handle:
            return sum(1 for line in handle if line.strip())

    async def read(self) -> SpoolContents:
        """What the spool holds (unreadable lines are logged and skipped)."""
        async with self._lock:
            if not self.path.exists():
                return SpoolContents()
            text = await asyncio.to_thread(self.path.read_text, "utf-8")
        lines = [line for line in text.splitlines() if line.strip()]
        contents = SpoolContents(lines=len(lines))
        for number, line in enumerate(lines, start=1):
            try:
                entry = _decode(line)
            except (ValueError, TypeError) as exc:
                log.error(
                    "spool %s line %d is unreadable and is skipped: %s", self.path, number, exc
                )
                continue
            if isinstance(entry, RecalledMessage):
                contents.recalled.append(entry)
            else:
                contents.turns.append(entry)
        return contents

    async def remove_first(self, count: int) -> None:
        """Drop the first ``count`` lines (those just written to the database)."""
        async with self._lock:
            if not self.path.exists():
                return
            lines = [line for line in self.path.read_text("utf-8").splitlines() if line.strip()][
                count:
            ]
            if lines:
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text("".join(line + "\n" for line in lines), "utf-8")
                tmp.replace(self.path)
            else:
                self.path.unlink()
