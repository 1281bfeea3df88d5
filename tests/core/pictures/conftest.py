"""A picture reader over the real OCR, a loopback picture server and the test's memory."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from memory_core.pictures import PictureReader
from memory_core.pictures.fetch import PictureFetcher
from memory_core.pictures.ocr import RapidOcrReader
from memory_core.service import TemporalMemory
from tests.picture_server import CountingReader, PictureServer, blank_picture, note_picture

MAX_BYTES = 100_000


@pytest.fixture(scope="session")
def ocr() -> Iterator[RapidOcrReader]:
    reader = RapidOcrReader()
    yield reader
    reader.close()


@pytest.fixture
def server() -> Iterator[PictureServer]:
    served = PictureServer(
        {
            "/note.png": note_picture(),
            "/same-note.png": note_picture(),
            "/sticker.gif": blank_picture(),
            "/big-sticker.png": note_picture(("表情包",) * 8),
        },
        endless_bytes=MAX_BYTES * 2,
    )
    yield served
    served.close()


@pytest.fixture
def counting(ocr: RapidOcrReader) -> CountingReader:
    return CountingReader(ocr)


@pytest.fixture
async def reader_factory(
    counting: CountingReader,
) -> AsyncIterator[Callable[..., PictureReader]]:
    built: list[PictureReader] = []

    def factory(memory: TemporalMemory, **overrides: Any) -> PictureReader:
        options: dict[str, Any] = dict(
            workers=1,
            queue_size=8,
            per_minute=100,
            sticker_max_bytes=2_000,
            text_max_chars=300,
        )
        options.update(overrides)
        options.setdefault("text_reader", counting)
        reader = PictureReader(
            memory=memory,
            fetcher=PictureFetcher(max_bytes=MAX_BYTES, timeout=30.0, max_redirects=3),
            **options,
        )
        built.append(reader)
        return reader

    yield factory
    for reader in built:
        await reader.aclose()
