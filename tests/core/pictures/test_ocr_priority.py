"""The OCR works in a process of its own at a lower CPU priority than the bot, so that on a
machine short of cores the replies come first; a worker that dies is started again."""

from __future__ import annotations

import os
import signal

from memory_core.errors import PictureError
from memory_core.pictures.ocr import OCR_NICENESS, RapidOcrReader
from tests.picture_server import fair_ocr, note_picture


async def test_the_ocr_reads_in_a_process_of_lower_priority():
    # The shipped niceness (the other tests' OCR is ``fair_ocr``). At nice +10 on a machine
    # kept busy by the rest of the run a note's ~2 s of CPU can take minutes: the read's bound
    # is one against a stuck worker only.
    reader = RapidOcrReader(timeout=600.0)
    try:
        assert await reader.read(note_picture(("优先级",))) == ["优先级"]
        worker = reader.worker_pid
        assert worker is not None and worker != os.getpid()
        own = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, worker) == min(own + OCR_NICENESS, 19)
    finally:
        reader.close()


async def test_a_worker_that_died_is_started_again_and_bad_bytes_are_refused():
    reader = fair_ocr()
    try:
        assert await reader.read(note_picture(("第一",))) == ["第一"]
        first = reader.worker_pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        try:
            await reader.read(note_picture(("第二",)))
        except PictureError as exc:  # it died under this picture: tried again later
            assert not exc.lasting
        assert await reader.read(note_picture(("第三",))) == ["第三"]
        assert reader.worker_pid not in (None, first)
        try:
            await reader.read(b"\x89PNG\r\n\x1a\n not a picture")
        except PictureError as exc:
            assert exc.lasting and "not a readable picture" in str(exc)
        else:
            raise AssertionError("bad bytes were read")
    finally:
        reader.close()
    assert reader.worker_pid is None


async def test_a_stalled_read_kills_its_worker_and_the_next_picture_is_read():
    # 10 ms is far less than starting the worker and loading the models takes.
    reader = fair_ocr(timeout=0.01)
    try:
        try:
            await reader.read(note_picture(("停滞",)))
        except PictureError as exc:
            assert not exc.lasting and "too long" in str(exc)
        else:
            raise AssertionError("a read within 10 ms, worker start included")
        reader.timeout = 120.0
        assert await reader.read(note_picture(("恢复",))) == ["恢复"]
    finally:
        reader.close()
    assert reader.worker_pid is None
