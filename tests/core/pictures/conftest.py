"""A picture reader over the real OCR, a loopback picture server and the test's memory."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from memory_core.pictures import PictureReader
from memory_core.pictures.ocr import RapidOcrReader, TextReader
from memory_core.service import TemporalMemory
from tests.picture_addresses import PublicPictureServer, public_fetcher
from tests.picture_server import CountingReader, blank_picture, note_picture

MAX_BYTES = 100_000


class RememberingReader:
    """The real OCR, each distinct picture read once a run: most tests here read the same few
    notes (half a second of CPU each), and the OCR gives the same lines for the same bytes. A
    picture it could not read is asked again (errors are not kept)."""

    def __init__(self, inner: TextReader) -> None:
        self.inner = inner
        self._lines: dict[bytes, list[str]] = {}

    async def read(self, picture: bytes) -> list[str]:
        key = hashlib.sha256(picture).digest()
        if key not in self._lines:
            self._lines[key] = await self.inner.read(picture)
        return list(self._lines[key])


@pytest.fixture(scope="session")
def remembering(ocr: RapidOcrReader) -> RememberingReader:
    return RememberingReader(ocr)


@pytest.fixture
def server() -> Iterator[PublicPictureServer]:
    served = PublicPictureServer(
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
def counting(remembering: RememberingReader) -> CountingReader:
    """Counts the pictures the reader under test asks to be read (each ask, remembered or
    not)."""
    return CountingReader(remembering)


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
            database=memory.parts.database,
            writer=memory.parts.writer,
            fetcher=public_fetcher(max_bytes=MAX_BYTES),
            **options,
        )
        built.append(reader)
        return reader

    yield factory
    for reader in built:
        await reader.aclose()
