"""Storing imported history: QQ text exports, nonebot-plugin-chatrecorder's message table and
the memory's own JSON lines.

Turns go in batches through ``TurnWriter.add_dialogues`` (validated, embedded in batches,
inserted with COPY, duplicates and opted-out people skipped by the database). Every turn has a
stable ``message_uuid`` — the source's, or one derived from its content, time and sender
(``target.StableIds``) — so importing the same file again adds nothing.

Imported turns keep their original times and sender names. They are not scored by the
evaluator (it scores exchanges as they happen): a turn imported without a score or expiry is
kept until forgotten, like a /remember note; a turn of a JSON-lines export keeps the score and
expiry its source gave it.
"""

from __future__ import annotations

import asyncio
import codecs
import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..dialogue.admin_store import PgAdminStore
from ..dialogue.turn_rows import message_uuid_for
from ..distill.store import PgDistilledStore, PortableMemory
from ..errors import DatabaseUnavailableError, EmbeddingError, MemoryCoreError
from ..models import TurnInput
from .chatrecorder import RecordRouter, read_chatrecorder
from .encoding import decode_export, decode_line, utf8_with_fallbacks
from .portable import line_type, memory_from_json, retention_from_json, turn_from_json
from .qq_text import LineProblem, parse_qq_text
from .target import ImportTarget, QQTextRouter, StableIds, pick_chat

if TYPE_CHECKING:
    from ..dialogue.writing import TurnWriter
    from ..parts import MemoryParts
    from ..storage.database_handle import Database

log = logging.getLogger(__name__)

IMPORT_CHUNK = 1000
FORMATS = ("jsonl", "qq-txt", "chatrecorder")


@dataclass
class ImportReport:
    """What an import did (or, in a dry run, would do)."""

    read: int = 0  # turns read and valid
    new: int = 0  # stored now (dry run: not stored yet)
    already: int = 0  # stored before (an earlier import, or the live bot)
    refused: int = 0  # not stored: the person opted out of memory in that chat
    memories_new: int = 0
    memories_already: int = 0
    system_lines: int = 0  # QQ's own notices, skipped
    without_text: int = 0  # chatrecorder: messages of images and the like only, skipped
    problems: list[LineProblem] = field(default_factory=list)
    sessions: Counter[str] = field(default_factory=Counter)
    encoding: str | None = None  # what a file was read as (None: a database)
    warnings: list[str] = field(default_factory=list)  # a doubtful decode, for the operator

    def summary(self, *, dry_run: bool) -> str:
        verb = "would store" if dry_run else "stored"
        parts = [
            *([f"read as {self.encoding}"] if self.encoding else []),
            f"{self.read} turns read",
            f"{verb} {self.new} new in {len(self.sessions)} session(s)",
            f"{self.already} already stored",
        ]
        if self.refused:
            parts.append(f"{self.refused} refused (opted out)")
        if self.memories_new or self.memories_already:
            parts.append(
                f"distilled memories: {verb} {self.memories_new} new, "
                f"{self.memories_already} already stored"
            )
        if self.system_lines:
            parts.append(f"{self.system_lines} system notices skipped")
        if self.without_text:
            parts.append(f"{self.without_text} messages without text skipped")
        parts.append(f"{len(self.problems)} bad line(s) skipped")
        return "; ".join(parts)


Progress = Callable[[ImportReport], None]
Show = Callable[[TurnInput], None]


@dataclass
class _Pending:
    line: int
    turn: TurnInput
    retention: tuple[int | None, datetime | None] | None


class TurnImporter:
    """Collects turns and stores them a batch at a time (or, in a dry run, shows them)."""

    def __init__(
        self,
        report: ImportReport,
        *,
        database: Database,
        writer: TurnWriter,
        dry_run: bool = False,
        chunk: int = IMPORT_CHUNK,
        progress: Progress | None = None,
        show: Show | None = None,
    ) -> None:
        self._database = database
        self._writer = writer
        self.report = report
        self.dry_run = dry_run
        self.chunk = chunk
        self.progress = progress
        self.show = show
        self._pending: list[_Pending] = []

    @classmethod
    def over(
        cls,
        parts: MemoryParts,
        report: ImportReport,
        *,
        dry_run: bool,
        progress: Progress | None,
        show: Show | None,
    ) -> TurnImporter:
        """An importer writing through the parts of an open memory."""
        return cls(
            report,
            database=parts.database,
            writer=parts.writer,
            dry_run=dry_run,
            progress=progress,
            show=show,
        )

    async def add(
        self,
        line: int,
        turn: TurnInput,
        retention: tuple[int | None, datetime | None] | None = None,
    ) -> None:
        try:
            self._writer.check_turn(turn)
        except MemoryCoreError as exc:
            self.report.problems.append(LineProblem(line, str(exc)))
            return
        self._pending.append(_Pending(line, turn, retention))
        if len(self._pending) >= self.chunk:
            await self.flush()

    async def flush(self) -> None:
        batch, self._pending = self._pending, []
        if not batch:
            return
        uuids = [message_uuid_for(p.turn) for p in batch]
        stored = await self._database.store(PgAdminStore).ids_by_uuid(uuids)
        fresh = [p for p, u in zip(batch, uuids, strict=True) if u not in stored]
        self.report.read += len(batch)
        self.report.already += len(batch) - len(fresh)
        if self.dry_run:
            for pending in fresh:
                if self.show is not None:
                    self.show(pending.turn)
                self.report.sessions[pending.turn.session_key] += 1
            self.report.new += len(fresh)
        elif fresh:
            inserted = await self._writer.add_dialogues([p.turn for p in fresh])
            self.report.new += inserted
            self.report.refused += len(fresh) - inserted
            # What the source scored keeps its score and expiry (new rows only).
            await self._database.store(PgAdminStore).set_retention(
                [
                    (message_uuid_for(p.turn), *p.retention)
                    for p in fresh
                    if p.retention is not None and p.retention != (None, None)
                ]
            )
            self.report.sessions.update(p.turn.session_key for p in fresh)
        if self.progress is not None:
            self.progress(self.report)


async def import_qq_text(
    parts: MemoryParts,
    path: Path,
    target: ImportTarget,
    *,
    chat: str | None = None,
    encoding: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    show: Show | None = None,
) -> ImportReport:
    """Import a QQ PC text export into ``target`` (see ``memory_core.transfer.target``), read
    in ``encoding`` if given (else detected, see ``decode_export``).

    ``ValueError`` when the file cannot be read as an export at all (unknown encoding, no
    message in it, several chats and no ``chat`` picked); bad lines are reported and skipped.
    """
    data = await asyncio.to_thread(path.read_bytes)
    decoded = decode_export(data, encoding)
    export = parse_qq_text(decoded.text)
    if not export.messages:
        first = f" (line {export.problems[0].line}: {export.problems[0].reason})"
        raise ValueError(
            "no message found: not a QQ text export?" + (first if export.problems else "")
        )
    messages = pick_chat(export, chat)
    report = ImportReport(
        problems=list(export.problems),
        encoding=decoded.encoding,
        warnings=list(decoded.warnings),
    )
    router = QQTextRouter(target, parts.tz, chat_name=chat or next(iter(export.chats), None))
    importer = TurnImporter.over(parts, report, dry_run=dry_run, progress=progress, show=show)
    for line, turn in router.turns(messages):
        await importer.add(line, turn)
    await importer.flush()
    report.problems.extend(router.problems)
    report.problems.sort(key=lambda p: p.line)
    report.system_lines = router.system_lines
    return report


async def import_chatrecorder(
    parts: MemoryParts,
    source: str,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
    show: Show | None = None,
) -> ImportReport:
    """Import the OneBot v11 messages of a nonebot-plugin-chatrecorder database (``source``: a
    SQLite file or a PostgreSQL DSN; see ``memory_core.transfer.chatrecorder``). Problems are
    numbered by the record's id."""
    records = await read_chatrecorder(source)
    report = ImportReport(problems=records.problems)
    router = RecordRouter(report.problems)
    importer = TurnImporter.over(parts, report, dry_run=dry_run, progress=progress, show=show)
    ids = StableIds()
    for record_id, turn in router.turns(records.messages):
        await importer.add(record_id, ids.assign(turn))
    await importer.flush()
    report.without_text = router.without_text
    return report


def read_json_lines(path: Path, fallbacks: list[int] | None = None) -> Iterator[tuple[int, Any]]:
    """``(line number, parsed JSON or the ValueError)`` for every non-blank line. The lines are
    UTF-8; one that is not is read as GB18030 and its number added to ``fallbacks``."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if number == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            try:
                line, fell_back = decode_line(raw)
            except ValueError as exc:
                yield number, exc
                continue
            if fell_back and fallbacks is not None:
                fallbacks.append(number)
            if line.strip():
                try:
                    yield number, json.loads(line)
                except ValueError as exc:
                    yield number, ValueError(f"not JSON: {exc}")
                except RecursionError:
                    yield number, ValueError("not JSON this import reads: nested too deeply")


async def import_json_file(
    parts: MemoryParts,
    path: Path,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
    show: Show | None = None,
) -> ImportReport:
    """``import_json_lines`` of a file (``read_json_lines``), naming the encoding it was read in."""
    fallbacks: list[int] = []
    lines = read_json_lines(path, fallbacks)
    report = await import_json_lines(parts, lines, dry_run=dry_run, progress=progress, show=show)
    report.encoding, warnings = utf8_with_fallbacks(fallbacks)
    report.warnings.extend(warnings)
    return report


async def import_json_lines(
    parts: MemoryParts,
    lines: Iterable[tuple[int, Any]],
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
    show: Show | None = None,
) -> ImportReport:
    """Import the memory's JSON lines (``memory_core.transfer.portable``): turns, then the
    distilled memories citing them. Bad lines are reported by number and skipped."""
    report = ImportReport()
    importer = TurnImporter.over(parts, report, dry_run=dry_run, progress=progress, show=show)
    ids = StableIds()
    memories: list[tuple[int, PortableMemory]] = []
    for number, data in lines:
        try:
            if isinstance(data, ValueError):
                raise data
            kind = line_type(data)
            if kind == "turn":
                turn = ids.assign(turn_from_json(data))
                retention = retention_from_json(data)
            elif kind == "memory":
                memories.append((number, memory_from_json(data)))
                continue
            else:
                continue
        except ValueError as exc:
            report.problems.append(LineProblem(number, str(exc)))
            continue
        await importer.add(number, turn, retention)
    await importer.flush()
    await _import_memories(parts, memories, report, dry_run=dry_run)
    return report


async def _import_memories(
    parts: MemoryParts,
    rows: list[tuple[int, PortableMemory]],
    report: ImportReport,
    *,
    dry_run: bool,
) -> None:
    if not rows:
        return
    sources = {u for _, row in rows for u in row.source_uuids}
    turn_ids = await parts.database.store(PgAdminStore).ids_by_uuid(sorted(sources))
    if dry_run:
        report.memories_new += len(rows)  # an upper bound: matching rows are found on insert
        return
    store = parts.database.store(PgDistilledStore)
    new_ids: dict[int, int] = {}
    inserted_ids: set[int] = set()
    for number, row in rows:
        try:
            new_id, inserted = await store.import_memory(
                row, sorted(turn_ids[u] for u in row.source_uuids if u in turn_ids)
            )
        except DatabaseUnavailableError:
            raise
        except MemoryCoreError as exc:  # the database refused this row's values
            report.problems.append(LineProblem(number, str(exc)))
            continue
        new_ids[row.memory.id] = new_id
        if inserted:
            inserted_ids.add(row.memory.id)
            report.memories_new += 1
        else:
            report.memories_already += 1
    # Only rows this import stored get their successor: a row found already stays as it is.
    await store.link_superseded(
        [
            (new_ids[row.memory.id], new_ids[row.memory.superseded_by])
            for _, row in rows
            if row.memory.id in inserted_ids and row.memory.superseded_by in new_ids
        ]
    )
    try:
        await parts.keeper.backfill_embeddings()
    except EmbeddingError as exc:  # stored; the daily upkeep embeds them
        log.warning("imported memories will be embedded later: %s", exc)
