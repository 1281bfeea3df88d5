"""What Pillow refuses is refused for good and the OCR worker lives on; a picture too large to
read at its size is reduced while it is decoded (and read); the worker is stopped when idle and
started again by the next picture."""

from __future__ import annotations

import asyncio

import pytest

from memory_core.errors import PictureError
from memory_core.pictures.ocr import RapidOcrReader
from tests.big_pictures import claimed_png, text_on_transparent
from tests.picture_server import fair_ocr, note_picture

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


async def test_a_large_transparent_picture_is_reduced_and_read_whole_across_detection_tiles(
    ocr: RapidOcrReader,
):
    picture = text_on_transparent()
    assert len(picture) < 500_000  # small enough for any picture cap
    # Its text runs across several detection tiles: read as one line, not cut at their seams.
    assert await ocr.read(picture) == ["丰巢快递柜取件码8848", "请于今晚十点前取走"]


async def test_the_worker_stops_when_idle_and_the_next_picture_starts_it_again():
    reader = fair_ocr(idle_stop=0.1)
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
