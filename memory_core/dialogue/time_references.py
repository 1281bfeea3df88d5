"""Filling in the time that turns stored before migration 008 talk about.

New rows get ``refers_start`` / ``refers_end`` when they are stored (``turn_rows``); rows from
before the migration have none, so a question about nothing but a time ("我今天上午要干嘛")
could not find a plan said in them ("我明天上午十点要去体检"). The maintenance loop walks those
rows in id order, a batch at a time and a few seconds a round, and records how far it got in
the metadata: a restart goes on from there, and once the walk reaches the end it never runs
again (later rows are filled when stored).
"""

from __future__ import annotations

import logging
import time
from datetime import tzinfo

from ..lang.timerange import referred_range
from ..storage.paging import keyset_pages
from .bad_rows import usable_time
from .upkeep_store import PgUpkeepStore

log = logging.getLogger(__name__)

# Metadata key: the last row id read by the walk, or DONE once every row was read.
PROGRESS_META = "time_reference_backfill"
DONE = "done"
BATCH_SIZE = 1000


class TimeReferenceBackfill:
    """The walk's state: ``after`` is the last row id read, ``None`` when no walk is due.

    Like ``VectorIndex`` it works on the upkeep store it is given: ``check`` runs while
    connecting, before ``Database`` hands the new pool out."""

    def __init__(self, tz: tzinfo, batch_size: int = BATCH_SIZE) -> None:
        self.tz = tz
        self.batch_size = batch_size
        self.after: int | None = None

    @property
    def due(self) -> bool:
        return self.after is not None

    async def check(self, store: PgUpkeepStore) -> None:
        """Read from the metadata whether (and from where) the walk is still to do."""
        progress = (await store.read_meta()).get(PROGRESS_META, "0")
        self.after = None if progress == DONE else int(progress)

    async def run(self, store: PgUpkeepStore, *, max_seconds: float | None = None) -> bool:
        """Walk on; with ``max_seconds`` stop after about that long. True once done."""
        if self.after is None:
            return True
        if self.after == 0:
            total = await store.count_without_time_reference(0)
            if total:
                log.info(
                    "reading the times %d stored turn(s) talk about (migration 008) "
                    "in the background",
                    total,
                )
        started = time.monotonic()
        read = found = 0
        pages = keyset_pages(
            lambda last: store.rows_without_time_reference(last, self.batch_size),
            lambda row: row[0],
            after=self.after,
        )
        async for rows in pages:
            references = []
            for row_id, content, created_at in rows:
                if not usable_time(created_at):  # a bad row (bad_rows): passed, not read
                    continue
                referred = referred_range(content, created_at, self.tz)
                if referred is not None:
                    references.append((row_id, referred.start, referred.end))
            await store.set_time_references(references)
            self.after = rows[-1][0]
            await store.write_meta({PROGRESS_META: str(self.after)})
            read += len(rows)
            found += len(references)
            if max_seconds is not None and time.monotonic() - started >= max_seconds:
                left = await store.count_without_time_reference(self.after)
                log.info(
                    "time references: %d turn(s) read this round (%d talk about a time), %d left",
                    read,
                    found,
                    left,
                )
                return False
        await store.write_meta({PROGRESS_META: DONE})
        if read or self.after:
            log.info("time references done: every stored turn has been read")
        self.after = None
        return True
