"""``keyset_pages``: the walk every whole-table loop shares. Pure checks, no database."""

from __future__ import annotations

from memory_core.storage.paging import keyset_pages

ROWS = [(i, f"row {i}") for i in (3, 5, 8, 13, 21, 34, 55)]


def _reader(reads: list[int], size: int = 3):  # type: ignore[no-untyped-def]
    async def read(after: int) -> list[tuple[int, str]]:
        reads.append(after)
        return [r for r in ROWS if r[0] > after][:size]

    return read


async def test_pages_follow_the_last_id_until_an_empty_page() -> None:
    reads: list[int] = []
    pages = [page async for page in keyset_pages(_reader(reads), lambda r: r[0])]
    assert [[r[0] for r in page] for page in pages] == [[3, 5, 8], [13, 21, 34], [55]]
    assert reads == [0, 8, 34, 55]  # each read after the last id seen; the last one is empty


async def test_a_walk_resumes_after_the_id_it_is_given() -> None:
    reads: list[int] = []
    pages = [page async for page in keyset_pages(_reader(reads), lambda r: r[0], after=21)]
    assert [[r[0] for r in page] for page in pages] == [[34, 55]]
    assert reads == [21, 55]


async def test_a_walk_stopped_early_reads_no_further_page() -> None:
    reads: list[int] = []
    async for page in keyset_pages(_reader(reads), lambda r: r[0]):
        assert page[0][0] == 3
        break
    assert reads == [0]
