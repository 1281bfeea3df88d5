"""What Pillow refuses is refused for good and the OCR worker lives on; a picture too large to
read at its size is reduced while it is decoded (and read); the worker is stopped when idle and
started again by the next picture."""

from __future__ import annotations

import asyncio
import io
import struct
import zlib

import pytest
from PIL import Image

from memory_core.errors import PictureError
from memory_core.pictures.ocr import RapidOcrReader
from tests.picture_server import note_picture


def claimed_png(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` pixels, with a few bytes of data."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data).to_bytes(4, "big")
        return len(data).to_bytes(4, "big") + kind + data + crc

    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0" * 1000))
        + chunk(b"IEND", b"")
    )


def text_on_transparent(size: int = 6300) -> bytes:
    """A large RGBA PNG, mostly transparent, with the parcel note's black text (enlarged five
    times) on a transparent ground: under the pixel cap, ~1 GB of OCR memory before."""
    note = Image.open(io.BytesIO(note_picture())).convert("L")
    note = note.resize((note.width * 5, note.height * 5), Image.Resampling.BICUBIC)
    ink = Image.new("RGBA", note.size, (0, 0, 0, 255))
    canvas = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    canvas.paste(ink, (600, 2600), mask=note.point(lambda v: 255 - v))
    out = io.BytesIO()
    canvas.save(out, "PNG")
    return out.getvalue()


BAD = {
    "a 50000x50000 header": claimed_png(50_000, 50_000),
    "7000x7000, over the pixel cap": claimed_png(7_000, 7_000),
    "a truncated PNG": note_picture()[:300],
    "a JPEG of noise": b"\xff\xd8\xff\xe0" + bytes(range(256)) * 4,
}


@pytest.mark.parametrize("picture", list(BAD.values()), ids=list(BAD))
async def test_a_picture_pillow_refuses_is_refused_for_good_and_the_worker_lives(
    ocr: RapidOcrReader, picture
):
    assert await ocr.read(note_picture(("活着",))) == ["活着"]
    worker = ocr.worker_pid
    with pytest.raises(PictureError) as refused:
        await ocr.read(picture)
    assert refused.value.lasting  # not tried again by the retry rounds
    assert ocr.worker_pid == worker
    assert await ocr.read(note_picture(("还活着",))) == ["还活着"]


async def test_a_large_transparent_picture_is_reduced_and_its_text_read(ocr: RapidOcrReader):
    picture = text_on_transparent()
    assert len(picture) < 500_000  # small enough for any picture cap
    lines = await ocr.read(picture)
    assert any("8848" in line for line in lines), lines


async def test_the_worker_stops_when_idle_and_the_next_picture_starts_it_again():
    reader = RapidOcrReader(idle_stop=0.1)
    try:
        assert await reader.read(note_picture(("第一",))) == ["第一"]
        first = reader.worker_pid
        assert first is not None
        for _ in range(600):  # the stop is the timer's; this only waits for it
            if reader.worker_pid is None:
                break
            await asyncio.sleep(0.1)
        assert reader.worker_pid is None
        assert await reader.read(note_picture(("第二",))) == ["第二"]
        assert reader.worker_pid not in (None, first)
    finally:
        reader.close()
