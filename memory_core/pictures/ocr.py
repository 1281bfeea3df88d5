"""Reading the text in a picture, offline: PP-OCRv4 through ``rapidocr-onnxruntime``.

The models ship inside the wheel (nothing is downloaded) and run on ONNX Runtime, which the
bundled embedding model already brings. Recognition is CPU work of about half a second a
screenshot once loaded (bench/RESULTS.md), so it runs in a thread of its own, one picture at a
time per reader, with ONNX Runtime held to one thread (which then computes on that thread) so the
bot's own replies keep a core. That thread runs at a lower priority (``OCR_NICENESS``): on a
machine short of cores the replies' event loop and embedder come first, and a picture waits.
"""

from __future__ import annotations

import asyncio
import io
import logging
import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np

from ..errors import PictureError

# A picture this large is not a chat screenshot; decoding it would cost more memory than
# reading it is worth (a 5 MB PNG can unpack to gigabytes).
MAX_PIXELS = 40_000_000
# Lines recognised with less confidence than this are noise (textures, emoji).
MIN_SCORE = 0.5
# How much less CPU priority the OCR's thread takes than the bot's (a Linux nice increment; 0
# keeps the same): with 10 a busy reply thread gets about ten times the OCR's share of a core.
OCR_NICENESS = 10

log = logging.getLogger(__name__)


def lower_thread_priority(increment: int) -> None:
    """Lower the calling thread's CPU priority by ``increment`` (Linux schedules threads one by
    one: the process's other threads keep theirs). Where that cannot be done, nothing changes."""
    if increment <= 0 or not hasattr(os, "setpriority"):
        return
    thread = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, min(current + increment, 19))
    except OSError as exc:
        log.debug("the OCR thread keeps its priority: %s", exc)


class TextReader(Protocol):
    """Reads the lines of text in a picture (an empty list when it has none)."""

    async def read(self, picture: bytes) -> list[str]: ...


def decoded(picture: bytes) -> np.ndarray:
    """The picture's first frame as a BGR array (what the OCR models take); ``PictureError``
    when it is no picture Pillow can open, or is too large to decode."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(picture)) as image:
                width, height = image.size
                if width * height > MAX_PIXELS:
                    raise PictureError(f"picture of {width}x{height} pixels is too large")
                rgb = image.convert("RGB")  # the first frame of an animation
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombWarning) as exc:
        raise PictureError(f"not a readable picture: {exc}") from exc
    array = np.asarray(rgb)
    return np.ascontiguousarray(array[:, :, ::-1])


class RapidOcrReader:
    """PP-OCRv4 (Chinese and English) loaded on first use; one picture at a time."""

    def __init__(self, *, threads: int = 1, niceness: int = OCR_NICENESS) -> None:
        self._threads = threads
        self._engine: Any = None
        self._lock = threading.Lock()
        # One thread, created on the first picture, lowered once; ONNX Runtime's own threads
        # (with ``threads`` > 1) are created from it and inherit its priority.
        self._executor = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix="picture-ocr",
            initializer=lower_thread_priority,
            initargs=(niceness,),
        )

    async def read(self, picture: bytes) -> list[str]:
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._read, picture)

    def _read(self, picture: bytes) -> list[str]:
        image = decoded(picture)
        with self._lock:  # the engine's sessions are not shared between threads
            if self._engine is None:
                from rapidocr_onnxruntime import RapidOCR

                self._engine = RapidOCR(intra_op_num_threads=self._threads, inter_op_num_threads=1)
            try:
                found, _ = self._engine(image)
            except Exception as exc:  # the library raises bare errors on odd shapes
                raise PictureError(f"text recognition failed: {exc!r}") from exc
        return [str(text) for _, text, score in found or () if float(score) >= MIN_SCORE]
