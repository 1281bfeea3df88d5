"""The OCR works on a thread of its own at a lower CPU priority than the bot's other threads,
so that on a machine short of cores the replies come first."""

from __future__ import annotations

import os
import threading

from memory_core.pictures.ocr import OCR_NICENESS, RapidOcrReader
from tests.picture_server import note_picture


async def test_the_ocr_reads_on_a_thread_of_lower_priority(ocr: RapidOcrReader):
    lines = await ocr.read(note_picture(("优先级",)))
    assert lines == ["优先级"]
    threads = [t for t in threading.enumerate() if t.name.startswith("picture-ocr")]
    assert threads
    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    for thread in threads:
        assert thread.native_id is not None
        assert os.getpriority(os.PRIO_PROCESS, thread.native_id) == min(own + OCR_NICENESS, 19)
