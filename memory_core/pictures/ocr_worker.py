"""The OCR's own process (``ocr.RapidOcrReader``): ``python -m memory_core.pictures.ocr_worker
NICENESS THREADS``. Reads pictures from its input (a 4-byte big-endian length, then the bytes)
and answers each with one JSON line, ``{"lines": [...]}`` or ``{"error": "..."}``; ends at the
end of its input."""

from __future__ import annotations

import json
import os
import sys
from typing import IO, Any

from memory_core.errors import PictureError
from memory_core.heap import give_back
from memory_core.pictures.ocr import load_engine, recognised


def _exactly(source: IO[bytes], size: int) -> bytes | None:
    data = source.read(size)
    return data if data is not None and len(data) == size else None


def serve(source: IO[bytes], answers: IO[bytes], threads: int) -> None:
    engine: Any = None
    while True:
        head = _exactly(source, 4)
        picture = _exactly(source, int.from_bytes(head, "big")) if head else None
        if picture is None:
            return
        try:
            if engine is None:
                engine = load_engine(threads)
            answer: dict[str, object] = {"lines": recognised(engine, picture)}
        except PictureError as exc:
            answer = {"error": str(exc)}
        # A picture's working memory (hundreds of MB of freed buffers) goes back now.
        give_back()
        answers.write(json.dumps(answer, ensure_ascii=False).encode("utf-8") + b"\n")
        answers.flush()


def main() -> None:
    niceness, threads = int(sys.argv[1]), int(sys.argv[2])
    if niceness > 0:
        os.nice(niceness)
    # The answers get a pipe of their own; anything a library prints goes to the log (stderr).
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, answers, threads)


if __name__ == "__main__":
    main()
