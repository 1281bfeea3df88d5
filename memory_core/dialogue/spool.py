"""A local file of what could not be written to the database yet: turns to store, QQ
messages recalled (withdrawn) by their senders, whose turns must then be deleted, and /forget
requests made while the database was unreachable (:meth:`TurnSpool.forget`).

Which write failures mean "try later" and which mean "this item is bad" is decided here, by
:func:`is_bad_item` and :func:`is_passing_refusal`, and nowhere else:

* **This item is bad** — the write failed because of the item's values, so writing it again
  would fail again: ``InvalidTurnError``; PostgreSQL data exceptions (SQLSTATE class 22, e.g.
  ``UntranslatableCharacterError``, ``InvalidTextRepresentationError``), integrity violations
  (class 23) and program limits (class 54, e.g. a value too large for an index or a tsvector);
  values the driver cannot encode (asyncpg's client-side ``DataError``, ``UnicodeError``,
  ``ValueError``, ``TypeError``). Such an item goes to the dead-letter file beside the spool
  (``<spool>.dead.jsonl``: one JSON line with the item, the error and the time) and is counted
  in the stats; the turns around it are written.
* **Try later** — the database cannot be reached (``DatabaseUnavailableError``), or refuses
  writes for now: connection errors (class 08), disk full and other resource shortages (53),
  a read-only database or transaction (25), serialisation failures and deadlocks (40), lock
  and statement timeouts (55, 57), operator intervention (57), system errors (58). The turn
  is spooled like during an outage and written once the database takes writes again, however
  long that takes. (A nearly full disk lets a small write through now and then; that proves
  nothing about the turns it refuses.)
* **Unforeseen** — any other error (internal errors, class XX; statement errors, 42, after a
  schema change; a trigger's own exception, P0001...). Treated as "try later", except that an
  item refused twice with such an error, while other writes went through between the two
  refusals, was refused for itself: it is dead-lettered, so that it cannot jam the spool.

Flushing (:meth:`TurnSpool.drain`) applies the /forget requests first (the turns they covered
left the spool when they were made, so every turn still spooled came after them), then takes
each other item on its own terms: turns are written in
batches, a batch that fails is retried item by item, a bad item is dead-lettered and the next
one tried. A lost connection stops the flush; so do two refusals with no write going through
between them (the database refuses writes), and the rest waits for the next flush.

Every write to the spool and to the dead-letter file is flushed and fsynced. A line that cannot
be read — the last line torn by a crash in the middle of a write, say — is skipped with a
warning and moved to the dead-letter file as it was.

The spool usually lives on the database's disk, so a full disk refuses both. Lines the file
cannot take are then held in memory (up to :data:`MAX_HELD` of them, with a warning that they
are lost if the bot stops) and written to the file before anything else once it takes writes
again; the turns are still answered meanwhile. Only past that bound does spooling fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import json
import logging
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import asyncpg

from ..errors import DatabaseUnavailableError, InvalidTurnError, StorageError
from ..models import ForgetScope, RecalledMessage, TurnInput
from ..storage.scopes import covers

log = logging.getLogger(__name__)

# SQLSTATE classes of errors about the values written, and of errors that say the database
# refuses writes for now (see the module docstring).
_BAD_DATA_CLASSES = ("22", "23", "54")
_PASSING_CLASSES = ("08", "25", "40", "53", "55", "57", "58")
FLUSH_BATCH = 500
MAX_HELD = 10_000  # spool lines kept in memory while the spool file cannot be written


def _driver_error(exc: BaseException) -> BaseException | None:
    cause: BaseException | None = exc
    while isinstance(cause, StorageError):  # the store wraps the driver's error
        cause = cause.__cause__
    return cause


def _sqlstate_class(error: BaseException | None) -> str | None:
    if isinstance(error, asyncpg.PostgresError):
        return str(getattr(error, "sqlstate", "") or "")[:2]
    return None


def is_bad_item(exc: BaseException) -> bool:
    """Whether writing failed because of the item itself (see the module docstring); any other
    failure means "try later"."""
    if isinstance(exc, InvalidTurnError):
        return True
    if isinstance(exc, DatabaseUnavailableError):
        return False
    error = _driver_error(exc)
    if isinstance(error, asyncpg.PostgresError):
        return _sqlstate_class(error) in _BAD_DATA_CLASSES
    return isinstance(error, (UnicodeError, ValueError, TypeError))


def is_passing_refusal(exc: BaseException) -> bool:
    """Whether a "try later" failure says the database refuses writes for now (unreachable,
    disk full, read-only...), as opposed to an unforeseen error (see the module docstring)."""
    if isinstance(exc, DatabaseUnavailableError):
        return True
    return _sqlstate_class(_driver_error(exc)) in _PASSING_CLASSES


def failure_text(exc: BaseException) -> str:
    """The error as one line: its class, the SQLSTATE when the database gave one, its text."""
    cause: BaseException = exc
    while isinstance(cause, StorageError) and cause.__cause__ is not None:
        cause = cause.__cause__
    sqlstate = getattr(cause, "sqlstate", None)
    state = f" [{sqlstate}]" if isinstance(sqlstate, str) else ""
    return f"{type(cause).__name__}{state}: {' '.join(str(cause).split())}"


@dataclass(frozen=True)
class SpoolEntry:
    """One line of the spool as read: its item, or why it could not be read."""

    number: int  # 0-based among the lines read
    raw: bytes
    item: TurnInput | RecalledMessage | ForgetScope | None
    error: str = ""


@dataclass
class DrainReport:
    """What one flush did."""

    turns: int = 0  # spooled turns written (duplicates included)
    new: int = 0  # ... of which were not stored yet
    recalled: int = 0  # recalled messages forgotten
    deleted: int = 0  # ... turns deleted for them
    forgotten: int = 0  # /forget requests applied
    dead: int = 0  # items moved to the dead-letter file
    stopped: BaseException | None = None  # the "try later" failure that stopped it
    left: int = 0  # items left in the spool


def _json_line(data: Any) -> bytes:
    # Text reaching the spool is scrubbed; backslashreplace only keeps a stray lone surrogate
    # from making the write fail (it comes back as a JSON escape and is scrubbed on flush).
    text = json.dumps(data, ensure_ascii=False, default=str)
    return (text + "\n").encode("utf-8", "backslashreplace")


Item = TurnInput | RecalledMessage | ForgetScope


def _encode(item: Item) -> dict[str, Any]:
    if isinstance(item, RecalledMessage):
        return {"recalled": dataclasses.asdict(item)}
    if isinstance(item, ForgetScope):
        return {"forget": dataclasses.asdict(item)}
    data = dataclasses.asdict(item)
    if item.created_at is not None:
        data["created_at"] = item.created_at.isoformat()
    return data


def _decode(line: str) -> Item:
    return _from_data(json.loads(line))


def _from_data(data: Any) -> Item:
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if "recalled" in data:
        return RecalledMessage(**data["recalled"])
    if "forget" in data:
        return ForgetScope(**data["forget"])
    if data.get("created_at"):
        data["created_at"] = datetime.fromisoformat(data["created_at"])
    return TurnInput(**data)


def _parse(number: int, raw: bytes) -> SpoolEntry:
    try:
        return SpoolEntry(number, raw, _decode(raw.decode("utf-8", "replace")))
    except (ValueError, TypeError, KeyError) as exc:
        return SpoolEntry(number, raw, None, f"unreadable line: {exc}")


def _count_lines(path: Path) -> int:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    return sum(1 for line in data.split(b"\n") if line.strip())


def _write_durably(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


WriteTurns = Callable[[Sequence[TurnInput]], Awaitable[int]]
Forget = Callable[[RecalledMessage], Awaitable[int]]
ForgetInDatabase = Callable[[ForgetScope], Awaitable[int]]
Takes = Callable[[TurnInput], bool]  # which turns a forget drops from the spool files
TornTakes = Callable[[dict[str, int | None]], bool]  # ... and which torn lines (``torn_fields``)


class TurnSpool:
    """Append-only JSON lines; every turn carries its message_uuid and deleting a recalled
    message twice deletes nothing more, so re-flushing is harmless."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.dead_path = path.with_name(f"{path.stem}.dead{path.suffix}")
        self._lock = asyncio.Lock()  # one writer of the spool file at a time
        self._drain_lock = asyncio.Lock()  # one flush at a time
        # Writes the database took (the core's and the flushes'), and for each spooled line
        # refused with an unforeseen error (by its hash), how many had been taken then.
        self._accepted = 0
        self._refusals: dict[int, int] = {}
        self._held: list[bytes] = []  # lines the file could not take yet, oldest first

    def note_accepted(self) -> None:
        """Count a write the database took (tells an item refused for itself from a database
        refusing every write)."""
        self._accepted += 1

    # ----------------------------------------------------------------- writing

    async def append(self, turn: TurnInput) -> None:
        """Keep ``turn`` for later; ``StorageError`` if the spool file cannot be written."""
        await self._append(_json_line(_encode(turn)))

    async def append_recall(self, recalled: RecalledMessage) -> None:
        await self._append(_json_line(_encode(recalled)))

    async def forget(self, scope: ForgetScope, *, keep_request: bool = False) -> int:
        """Drop the turns ``scope`` covers, spooled and dead-lettered; with ``keep_request``,
        keep the request in the spool, to be applied to the database by the next flush (it
        cannot be reached now). Returns how many turns were dropped. Waits for a flush under
        way."""
        return await self.drop(
            lambda turn: covers(scope, turn),
            torn=lambda fields: _torn_covered(scope, fields),
            request=scope if keep_request else None,
        )

    async def drop(
        self, takes: Takes, *, torn: TornTakes | None = None, request: ForgetScope | None = None
    ) -> int:
        """Drop the turns ``takes`` names from the spool and from the dead-letter file (a
        forgotten turn's text stays on no disk), each file rewritten whole and renamed into
        place; with ``request``, append it to the spool (``forget``). A line a crash tore, no
        longer a turn, goes when ``torn`` takes the fields it still shows (``torn_fields``).
        Other lines stay as they were. Returns how many lines were dropped. Waits for a flush
        under way."""

        def spooled(n: int, line: bytes) -> bool:
            return _takes(takes, torn, _parse(n, line))

        async with self._drain_lock, self._lock:
            kept = [line for n, line in enumerate(self._held) if not spooled(n, line)]
            dropped = len(self._held) - len(kept)
            self._held = kept
            extra = [_json_line(_encode(request)).rstrip(b"\n")] if request is not None else []
            try:
                dropped += await asyncio.to_thread(_drop_lines, self.path, spooled, extra)
            except OSError as exc:
                raise StorageError(f"cannot rewrite the spool {self.path}: {exc}") from exc
            try:
                buried = await asyncio.to_thread(
                    _drop_lines, self.dead_path, lambda n, line: _takes_dead(takes, torn, line), []
                )
            except OSError as exc:
                raise StorageError(f"cannot rewrite {self.dead_path}: {exc}") from exc
        if buried:
            log.info("%d dead-lettered turn(s) forgotten from %s", buried, self.dead_path)
        return dropped + buried

    async def _append(self, line: bytes) -> None:
        async with self._lock:
            self._held.append(line)
            await self._release_held()
            if len(self._held) > MAX_HELD:
                self._held.pop()
                raise StorageError(
                    f"cannot write the spool {self.path}, and {MAX_HELD} lines already wait "
                    "in memory for it"
                )

    async def _release_held(self) -> None:
        """Write the held lines to the file (under ``_lock``); they stay held if it fails."""
        if not self._held:
            return
        try:
            await asyncio.to_thread(self._append_sync, self.path, b"".join(self._held))
        except OSError as exc:
            if len(self._held) == 1 or len(self._held) % 1000 == 0:
                log.warning(
                    "cannot write the spool %s (%s); %d line(s) wait in memory for it and are "
                    "lost if the bot stops before it can be written",
                    self.path,
                    exc,
                    len(self._held),
                )
            return
        if len(self._held) > 1:
            log.warning(
                "the spool %s takes writes again: %d held line(s) written",
                self.path,
                len(self._held),
            )
        self._held.clear()

    @staticmethod
    def _append_sync(path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a+b", buffering=0) as handle:
            size = handle.seek(0, os.SEEK_END)
            # A line torn by a crash has no newline; the next line must not be glued to it.
            if size > 0:
                handle.seek(-1, os.SEEK_END)
                if handle.read(1) != b"\n":
                    data = b"\n" + data
            try:
                rest = memoryview(data)
                while rest:
                    written = handle.write(rest)
                    if not written:
                        raise OSError(errno.ENOSPC, "the spool file took no more bytes")
                    rest = rest[written:]
                os.fsync(handle.fileno())
            except OSError:
                # A full disk takes part of the data: cut it off, so that no torn line is left
                # for the caller's retry to follow.
                with contextlib.suppress(OSError):
                    handle.truncate(size)
                raise

    async def dead_letter(self, item: Item, error: BaseException) -> None:
        """Move an item that can never be written to the dead-letter file (logged at WARNING)."""
        await self._bury([(_encode(item), failure_text(error))])

    async def _bury(self, letters: Sequence[tuple[Any, str]]) -> None:
        if not letters:
            return
        at = datetime.now(timezone.utc).isoformat()
        data = b"".join(
            _json_line({"item": item, "error": error, "at": at}) for item, error in letters
        )
        async with self._lock:
            try:
                await asyncio.to_thread(self._append_sync, self.dead_path, data)
            except OSError as exc:
                raise StorageError(f"cannot write {self.dead_path}: {exc}") from exc
        log.warning(
            "%d item(s) that can never be written were moved to %s (%s)",
            len(letters),
            self.dead_path,
            "; ".join(sorted({error.split(":")[0] for _, error in letters})),
        )

    # ----------------------------------------------------------------- reading

    def pending(self) -> int:
        """How many entries wait in the spool, held lines included (counts lines; cheap for a
        spool's size)."""
        return _count_lines(self.path) + len(self._held)

    def waiting_forgets(self) -> list[ForgetScope]:
        """The /forget requests waiting in the spool for the database (a bot started again
        holds back their quotes until the flush: ``Citations.hold_back``)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        lines = [line for line in data.split(b"\n") if line.strip()] + self._held
        items = (_parse(n, line).item for n, line in enumerate(lines))
        return [item for item in items if isinstance(item, ForgetScope)]

    def dead_letters(self) -> int:
        """How many items were moved to the dead-letter file, ever (until it is removed)."""
        return _count_lines(self.dead_path)

    async def read(self) -> tuple[list[SpoolEntry], int]:
        """The entries of the spool file and the size in bytes they were read from; lines held
        in memory are written to the file first, when it takes them."""
        async with self._lock:
            await self._release_held()
            try:
                data = await asyncio.to_thread(self.path.read_bytes)
            except FileNotFoundError:
                return [], 0
        lines = [line for line in data.split(b"\n") if line.strip()]
        return [_parse(number, raw) for number, raw in enumerate(lines)], len(data)

    async def _keep_only(self, kept: Sequence[SpoolEntry], read_size: int) -> None:
        """Rewrite the spool as ``kept`` plus whatever was appended after the read."""
        async with self._lock:
            try:
                await asyncio.to_thread(self._keep_only_sync, kept, read_size)
            except OSError as exc:
                raise StorageError(f"cannot rewrite the spool {self.path}: {exc}") from exc

    def _keep_only_sync(self, kept: Sequence[SpoolEntry], read_size: int) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        rest = data[read_size:]
        lines = [entry.raw for entry in kept] + [line for line in rest.split(b"\n") if line.strip()]
        if lines:
            _write_durably(self.path, b"".join(line + b"\n" for line in lines))
        elif data:
            self.path.unlink()

    # ----------------------------------------------------------------- flushing

    async def drain(
        self, write_turns: WriteTurns, forget: Forget, forget_in_database: ForgetInDatabase
    ) -> DrainReport:
        """Apply the /forget requests with ``forget_in_database``, write the spooled turns with
        ``write_turns`` (returns how many were new), then forget the recalled messages with
        ``forget`` (returns turns deleted). Each item on its own terms, as the module docstring
        says; what is done leaves the spool."""
        async with self._drain_lock:
            entries, read_size = await self.read()
            # Lines the file still cannot take are flushed from memory, after the file's.
            held = [_parse(len(entries) + n, line) for n, line in enumerate(self._held)]
            drain = _Drain(self, write_turns, forget, forget_in_database)
            try:
                await drain.run(entries + held)
            finally:
                # Dead letters first: an item leaves the spool only once it is kept elsewhere.
                await self._bury(drain.dead)
                for entry in held:
                    # (An append meanwhile may have moved the held lines to the file.)
                    if entry.number in drain.done and entry.raw in self._held:
                        self._held.remove(entry.raw)
                if drain.done:
                    kept = [entry for entry in entries if entry.number not in drain.done]
                    await self._keep_only(kept, read_size)
                    self._refusals = {
                        hash(entry.raw): self._refusals[hash(entry.raw)]
                        for entry in kept + held
                        if entry.number not in drain.done and hash(entry.raw) in self._refusals
                    }
                drain.report.left = len(entries) + len(held) - len(drain.done)
            return drain.report

    def _refused_before(self, entry: SpoolEntry) -> bool:
        """Note a "try later" refusal of ``entry``; whether it was refused before, with other
        writes going through since (then it is refused for itself)."""
        key = hash(entry.raw)
        before = self._refusals.get(key)
        self._refusals[key] = self._accepted
        return before is not None and self._accepted > before


def _takes(takes: Takes, torn: TornTakes | None, entry: SpoolEntry) -> bool:
    if isinstance(entry.item, TurnInput):
        return takes(entry.item)
    return entry.item is None and torn is not None and torn(torn_fields(entry.raw))


def _takes_dead(takes: Takes, torn: TornTakes | None, line: bytes) -> bool:
    """Whether a line of the dead-letter file (``{"item": ..., "error": ..., "at": ...}``)
    holds a turn ``takes`` names, or a torn one ``torn`` takes (the line itself torn, or an
    unreadable spool line buried as its text)."""
    try:
        letter = json.loads(line.decode("utf-8", "replace"))
        item = letter["item"] if isinstance(letter, dict) else None
    except (ValueError, KeyError):
        return torn is not None and torn(torn_fields(line))
    try:
        turn = _decode(item) if isinstance(item, str) else _from_data(item)
    except (ValueError, TypeError, KeyError):
        raw = item.encode("utf-8", "replace") if isinstance(item, str) else line
        return torn is not None and torn(torn_fields(raw))
    return isinstance(turn, TurnInput) and takes(turn)


# The fields of a turn's JSON line that say whose it is, as far as a torn line still shows them.
_TORN_FIELD = re.compile(rb'"(user_id|group_id)": (\d+|null)')


def torn_fields(raw: bytes) -> dict[str, int | None]:
    """``user_id`` and ``group_id`` of a turn line a crash tore (no longer JSON), those it
    still shows (a turn's line begins with its ``user_id``)."""
    return {
        match.group(1).decode(): None if match.group(2) == b"null" else int(match.group(2))
        for match in _TORN_FIELD.finditer(raw)
    }


def _torn_covered(scope: ForgetScope, fields: dict[str, int | None]) -> bool:
    """Whether a torn line may be of ``scope``: its person (or group) is shown and is the
    scope's, and no field it still shows says otherwise (its QQ account is torn off: a torn
    line of the person goes from every account's memory)."""
    if scope.everything:
        return True
    if "group_id" in fields:
        group = fields["group_id"]
        if scope.group_id is not None and group != scope.group_id:
            return False
        if scope.private_only and group is not None:
            return False
    elif scope.user_id is None:
        return False  # a group's forget, and the line's group is torn off
    return scope.user_id is None or fields.get("user_id") == scope.user_id


def _drop_lines(path: Path, dropped: Callable[[int, bytes], bool], extra: list[bytes]) -> int:
    """Rewrite ``path`` without the lines ``dropped`` names, with ``extra`` lines appended
    (write a new file, rename it over); how many lines went. Untouched when nothing changes."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        data = b""
    lines = [line for line in data.split(b"\n") if line.strip()]
    kept = [line for n, line in enumerate(lines) if not dropped(n, line)]
    kept += extra
    if len(kept) != len(lines) or extra:
        if kept:
            _write_durably(path, b"".join(line + b"\n" for line in kept))
        else:
            path.unlink()
    return len(lines) + len(extra) - len(kept)


def _turn(entry: SpoolEntry) -> TurnInput:
    assert isinstance(entry.item, TurnInput)
    return entry.item


class _Stop(Exception):
    """Ends a drain: the database is unreachable or refuses writes; the rest waits."""

    def __init__(self, failure: BaseException) -> None:
        super().__init__(str(failure))
        self.failure = failure


@dataclass
class _Drain:
    """One flush of a spool snapshot (the rules are in the module docstring)."""

    spool: TurnSpool
    write_turns: WriteTurns
    forget: Forget
    forget_in_database: ForgetInDatabase
    report: DrainReport = field(default_factory=DrainReport)
    done: set[int] = field(default_factory=set)  # entries written, forgotten or buried
    dead: list[tuple[Any, str]] = field(default_factory=list)  # (item, error) to bury
    refused: BaseException | None = None  # a refusal no write has gone through since

    async def run(self, entries: Sequence[SpoolEntry]) -> None:
        turns: list[SpoolEntry] = []
        recalls: list[SpoolEntry] = []
        forgets: list[SpoolEntry] = []
        for entry in entries:
            if isinstance(entry.item, TurnInput):
                turns.append(entry)
            elif isinstance(entry.item, RecalledMessage):
                recalls.append(entry)
            elif isinstance(entry.item, ForgetScope):
                forgets.append(entry)
            else:
                log.warning("spool line %d is skipped: %s", entry.number + 1, entry.error)
                self._bury(entry, entry.raw.decode("utf-8", "replace"), entry.error)
        try:
            for entry in forgets:  # before the turns: those spooled since must stay
                await self._write(entry)
            start = 0
            while start < len(turns):
                # The first turn, and the turn after a refusal, go alone: while the database
                # refuses writes, a flush costs two attempts (and embeddings), not a batch's.
                size = 1 if start == 0 or self.refused is not None else FLUSH_BATCH
                await self._write_batch(turns[start : start + size])
                start += size
            # After the turns: a recalled message may be among them.
            for entry in recalls:
                await self._write(entry)
            if self.refused is not None:  # no write has gone through since the last refusal
                raise _Stop(self.refused)
        except _Stop as stop:
            self.report.stopped = stop.failure

    async def _write_batch(self, batch: Sequence[SpoolEntry]) -> None:
        if len(batch) > 1:
            try:
                new = await self.write_turns([_turn(entry) for entry in batch])
            except Exception as exc:
                if isinstance(exc, DatabaseUnavailableError):
                    raise _Stop(exc) from exc
                if not isinstance(exc, StorageError) and not is_bad_item(exc):
                    raise
            else:
                self._written(batch, new)
                return
        for entry in batch:  # one by one, to find the bad ones
            await self._write(entry)

    async def _write(self, entry: SpoolEntry) -> None:
        """Write one entry. A bad one is buried; a lost connection, or a second refusal with
        no write gone through since the first, ends the drain."""
        item = entry.item if isinstance(entry.item, RecalledMessage | ForgetScope) else _turn(entry)
        try:
            if isinstance(item, RecalledMessage):
                self.report.deleted += await self.forget(item)
                self.report.recalled += 1
                self.done.add(entry.number)
                self._accepted()
            elif isinstance(item, ForgetScope):
                self.report.deleted += await self.forget_in_database(item)
                self.report.forgotten += 1
                self.done.add(entry.number)
                self._accepted()
            else:
                self._written([entry], await self.write_turns([item]))
        except Exception as exc:
            if is_bad_item(exc):
                self._bury(entry, _encode(item), failure_text(exc))
                return
            if isinstance(exc, DatabaseUnavailableError):
                raise _Stop(exc) from exc
            if not isinstance(exc, StorageError):
                raise
            if not is_passing_refusal(exc) and self.spool._refused_before(entry):
                reason = f"refused twice while other writes went through: {failure_text(exc)}"
                self._bury(entry, _encode(item), reason)
            elif self.refused is not None:  # two refusals in a row: writes are refused
                raise _Stop(exc) from exc
            else:
                self.refused = exc

    def _written(self, entries: Sequence[SpoolEntry], new: int) -> None:
        self.done.update(entry.number for entry in entries)
        self.report.turns += len(entries)
        self.report.new += new
        self._accepted()

    def _accepted(self) -> None:
        self.spool.note_accepted()
        self.refused = None

    def _bury(self, entry: SpoolEntry, item: Any, error: str) -> None:
        self.dead.append((item, error))
        self.done.add(entry.number)
        self.report.dead += 1
