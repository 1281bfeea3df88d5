"""Reading the text in a picture, offline: PP-OCRv4 through ``rapidocr-onnxruntime``.

The models ship inside the wheel (nothing is downloaded) and run on ONNX Runtime, which the
bundled embedding model already brings. Recognition is CPU work of about half a second a
screenshot once loaded (bench/RESULTS.md), so it runs in a process of its own
(``ocr_worker``), one picture at a time per reader, with ONNX Runtime held to one thread so the
bot's own replies keep a core. A process, not a thread: much of the OCR's pre- and
post-processing is Python that would hold the bot's interpreter lock while a reply waits for it,
and a process can be given a lower CPU priority as a whole (``OCR_NICENESS``), so that on a
machine short of cores the replies' event loop and embedder come first and a picture waits.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
import time
from typing import IO, Any, Protocol

import numpy as np

from ..errors import PictureError
from .decoding import decoded

# The most pixels text detection is run on (see ``_bounded_detection``): RapidOCR's own
# sizing for anything up to 2,000 x 2,000.
DETECT_PIXELS = 4_000_000
# Text detection runs over tiles this many pixels a side (multiples of the model's 32), each
# seen with this margin around it (``_tiled``).
DETECT_TILE = 512
DETECT_MARGIN = 160
# Lines recognised per model run (RapidOCR's default: 6, each batch as wide as its widest
# line): one at a time holds one line's buffers, ~25 MB less at the same CPU (bench/RESULTS.md).
RECOGNITION_BATCH = 1
# In the worker, glibc serves every allocation of this size or more with a mapping of its
# own, given back the moment it is freed. Its default threshold grows to 32 MB as large
# buffers are freed, and then the next picture's model buffers are carved from the heap, which
# fragments: the worker peaked ~130 MB higher on a screenshot (bench/RESULTS.md, 2026-12-07).
# The price: fresh pages for each large buffer, ~1.7-1.9x the CPU of a picture, at nice +10.
WORKER_MMAP_THRESHOLD = 4 * 1024 * 1024
# Lines recognised with less confidence than this are noise (textures, emoji).
MIN_SCORE = 0.5
# How much less CPU priority the OCR's process takes than the bot (a nice increment; 0 keeps
# the same): at 10 a busy reply thread gets about ten times the OCR's share of a core.
OCR_NICENESS = 10
# How long the worker stays without a picture before it is stopped: its models and libraries
# are ~175 MB a bot at rest need not hold; starting it again costs ~2 s of CPU (at nice +10).
IDLE_STOP = 60.0
# How long the worker may take to stop when asked before it is killed.
STOP_TIMEOUT = 5.0
# How long one picture may take before its worker is killed (the picture is tried again
# later): a screenshot takes ~2 s of CPU, many times that at nice +10 on a busy machine.
READ_TIMEOUT = 120.0

log = logging.getLogger(__name__)


class TextReader(Protocol):
    """Reads the lines of text in a picture (an empty list when it has none)."""

    async def read(self, picture: bytes) -> list[str]: ...


def load_engine(threads: int) -> Any:
    """The PP-OCRv4 engine (in the worker process), its text detection held to
    ``DETECT_PIXELS`` and run in tiles of ``DETECT_TILE``."""
    from rapidocr_onnxruntime import RapidOCR

    engine = RapidOCR(intra_op_num_threads=threads, inter_op_num_threads=1)
    engine.text_rec.rec_batch_num = RECOGNITION_BATCH
    detector = engine.text_det
    detector.get_preprocess = _bounded_detection(detector)
    detector.infer = _tiled(detector.infer)
    return engine


def _bounded_detection(detector: Any) -> Any:
    """RapidOCR's preparation of a picture for text detection (enlarged until its shorter
    side is ``limit_side_len``, so small text is found), but never past ``DETECT_PIXELS``
    (a thin strip would otherwise be enlarged to many millions)."""
    import cv2
    from rapidocr_onnxruntime.ch_ppocr_det.utils import DetPreProcess

    # Only normalises (and rounds to the model's multiple of 32): the size is chosen here.
    normalise = DetPreProcess(10**9, "max", detector.mean, detector.std)

    def prepared(image: np.ndarray) -> np.ndarray:
        height, width = image.shape[:2]
        ratio = max(1.0, detector.limit_side_len / min(height, width))
        ratio = min(ratio, (DETECT_PIXELS / (height * width)) ** 0.5)
        size = (max(32, round(width * ratio)), max(32, round(height * ratio)))
        normalised: np.ndarray = normalise(cv2.resize(image, size))
        return normalised

    return lambda _longest_side: prepared


def _tiled(infer: Any) -> Any:
    """The detection model run over tiles of ``DETECT_TILE`` pixels a side, each with a margin
    of ``DETECT_MARGIN`` around it whose answer is dropped: the model's working memory (~230
    bytes a pixel of its input) then stays that of one tile, whatever the picture's size, and
    the text map put together is the one the whole picture gives (the margin covers what the
    model looks at around a pixel; bench/RESULTS.md)."""

    def tiled(batch: np.ndarray) -> list[np.ndarray]:
        _, _, height, width = batch.shape
        if height * width <= (DETECT_TILE + 2 * DETECT_MARGIN) ** 2:
            return list(infer(batch))
        # The model answers one channel (the text probability) at the size it is given.
        whole = np.zeros((1, 1, height, width), dtype=np.float32)
        for top in range(0, height, DETECT_TILE):
            for left in range(0, width, DETECT_TILE):
                y0, x0 = max(0, top - DETECT_MARGIN), max(0, left - DETECT_MARGIN)
                y1 = min(height, top + DETECT_TILE + DETECT_MARGIN)
                x1 = min(width, left + DETECT_TILE + DETECT_MARGIN)
                tile = infer(np.ascontiguousarray(batch[:, :, y0:y1, x0:x1]))[0]
                bottom, right = min(height, top + DETECT_TILE), min(width, left + DETECT_TILE)
                whole[:, :, top:bottom, left:right] = tile[
                    :, :, top - y0 : bottom - y0, left - x0 : right - x0
                ]
        return [whole]

    return tiled


def recognised(engine: Any, picture: bytes) -> list[str]:
    """The confident lines of text in ``picture`` (in the worker process)."""
    image = decoded(picture)
    try:
        found, _ = engine(image)
    except Exception as exc:  # the library raises bare errors on odd shapes
        raise PictureError(f"text recognition failed: {exc!r}") from exc
    return [str(text) for _, text, score in found or () if float(score) >= MIN_SCORE]


class RapidOcrReader:
    """PP-OCRv4 (Chinese and English) in a worker process started when a picture comes, at a
    lower priority, and stopped after ``idle_stop`` seconds without one; one picture at a
    time. A worker that dies is started again for the next picture (the picture it was
    reading is skipped, to be tried again). :meth:`close` stops it."""

    def __init__(
        self,
        *,
        threads: int = 1,
        niceness: int = OCR_NICENESS,
        timeout: float = READ_TIMEOUT,
        idle_stop: float = IDLE_STOP,
    ) -> None:
        self._threads = threads
        self._niceness = niceness
        self.timeout = timeout
        self._idle_stop = idle_stop
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._last_read = 0.0
        self._idle_timer: asyncio.TimerHandle | None = None

    @property
    def worker_pid(self) -> int | None:
        """The worker process's id while it runs (benchmarks read its CPU time)."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    async def read(self, picture: bytes) -> list[str]:
        # The thread only waits on the worker's pipe: the CPU work is the worker's.
        try:
            answer = await asyncio.wait_for(asyncio.to_thread(self._ask, picture), self.timeout)
        except TimeoutError:
            # A stalled worker would hold the lock for good: killing it ends the waiting
            # thread's read, which then stops it, and the next picture starts a new one.
            self._kill()
            raise PictureError("text recognition took too long", lasting=False) from None
        finally:
            self._stop_when_idle()
        if "error" in answer:
            raise PictureError(str(answer["error"]))
        return [str(line) for line in answer.get("lines", ())]

    def _stop_when_idle(self) -> None:
        """Stop the worker ``idle_stop`` seconds after its last picture, unless another came."""
        self._last_read = time.monotonic()
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        loop = asyncio.get_running_loop()
        self._idle_timer = loop.call_later(self._idle_stop, self._idle_stopping, loop)

    def _idle_stopping(self, loop: asyncio.AbstractEventLoop) -> None:
        self._idle_timer = None
        # Stopping waits on the worker's exit: off the event loop.
        loop.run_in_executor(None, self.stop_if_idle)

    def stop_if_idle(self) -> bool:
        """Stop the worker when no picture is being read and none was for ``idle_stop``
        seconds (the next picture starts it again); whether it was stopped."""
        if not self._lock.acquire(blocking=False):
            return False  # a picture is being read
        try:
            if self._process is None or time.monotonic() - self._last_read < self._idle_stop:
                return False
            self._stop()
            return True
        finally:
            self._lock.release()

    def close(self) -> None:
        """Stop the worker (it also stops by itself when this process ends)."""
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        with self._lock:
            self._stop()

    def _kill(self) -> None:
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()

    def _ask(self, picture: bytes) -> dict[str, Any]:
        with self._lock:
            process = self._running()
            stdin, stdout = _pipes(process)
            try:
                stdin.write(len(picture).to_bytes(4, "big") + picture)
                stdin.flush()
                line = stdout.readline()
            except OSError:
                line = b""
            if not line:
                self._stop()
                raise PictureError("the OCR worker ended", lasting=False)
        answer = json.loads(line)
        return answer if isinstance(answer, dict) else {"error": "unreadable OCR answer"}

    def _running(self) -> subprocess.Popen[bytes]:
        if self._process is not None and self._process.poll() is None:
            return self._process
        # The worker imports this very package: the same folders first on its path.
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
            MALLOC_MMAP_THRESHOLD_=str(WORKER_MMAP_THRESHOLD),
        )
        command = [sys.executable, "-m", "memory_core.pictures.ocr_worker"]
        command += [str(self._niceness), str(self._threads)]
        self._process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env
        )
        return self._process

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        stdin, _ = _pipes(process)
        try:
            stdin.close()  # the worker ends at the end of its input
            process.wait(STOP_TIMEOUT)
        except (OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def _pipes(process: subprocess.Popen[bytes]) -> tuple[IO[bytes], IO[bytes]]:
    if process.stdin is None or process.stdout is None:
        raise PictureError("the OCR worker has no pipes", lasting=False)
    return process.stdin, process.stdout
