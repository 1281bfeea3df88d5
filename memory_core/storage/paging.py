"""Walking a table by keyset: page after page in id order, each read after the last id seen.

Every walk over a whole table (re-embedding, re-indexing, the time-reference backfill, the
export) reads this way rather than by OFFSET: a page costs the same however far the walk is, and
rows written or deleted meanwhile shift no later page.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TypeVar

Row = TypeVar("Row")


async def keyset_pages(
    read: Callable[[int], Awaitable[Sequence[Row]]],
    last_id: Callable[[Row], int],
    *,
    after: int = 0,
) -> AsyncIterator[Sequence[Row]]:
    """Each non-empty page ``read(after)`` returns, ``after`` moving to ``last_id`` of the page's
    last row; ends at the first empty page. A caller that stops early (a time budget) keeps the
    last id it saw to go on from there."""
    while page := await read(after):
        yield page
        after = last_id(page[-1])
