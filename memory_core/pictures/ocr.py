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
import io
import json
import logging
import os
import subprocess
import sys
import threading
import warnings
from typing import IO, Any, Protocol

import numpy as np

from ..errors import PictureError

# A picture this large is not a chat screenshot; decoding it would cost more memory than
# reading it is worth (a 5 MB PNG can unpack to gigabytes).
MAX_PIXELS = 40_000_000
# Lines recognised with less confidence than this are noise (textures, emoji).
MIN_SCORE = 0.5
# How much less CPU priority the OCR's process takes than the bot (a nice increment; 0 keeps
# the same): at 10 a busy reply thread gets about ten times the OCR's share of a core.
OCR_NICENESS = 10
# How long the worker may take to stop when asked before it is killed.
STOP_TIMEOUT = 5.0
# How long one picture may take before its worker is killed (the picture is tried again
# later): a screenshot takes ~2 s of CPU, many times that at nice +10 on a busy machine.
READ_TIMEOUT = 120.0

log = logging.getLogger(__name__)


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


def load_engine(threads: int) -> Any:
    """The PP-OCRv4 engine (in the worker process)."""
    from rapidocr_onnxruntime import RapidOCR

    return RapidOCR(intra_op_num_threads=threads, inter_op_num_threads=1)


def recognised(engine: Any, picture: bytes) -> list[str]:
    """The confident lines of text in ``picture`` (in the worker process)."""
    image = decoded(picture)
    try:
        found, _ = engine(image)
    except Exception as exc:  # the library raises bare errors on odd shapes
        raise PictureError(f"text recognition failed: {exc!r}") from exc
    return [str(text) for _, text, score in found or () if float(score) >= MIN_SCORE]


class RapidOcrReader:
    """PP-OCRv4 (Chinese and English) in a worker process started on first use, at a lower
    priority; one picture at a time. A worker that dies is started again for the next picture
    (the picture it was reading is skipped, to be tried again). :meth:`close` stops it."""

    def __init__(
        self, *, threads: int = 1, niceness: int = OCR_NICENESS, timeout: float = READ_TIMEOUT
    ) -> None:
        self._threads = threads
        self._niceness = niceness
        self.timeout = timeout
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None

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
        if "error" in answer:
            raise PictureError(str(answer["error"]))
        return [str(line) for line in answer.get("lines", ())]

    def close(self) -> None:
        """Stop the worker (it also stops by itself when this process ends)."""
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
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
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
