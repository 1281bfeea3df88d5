"""Test pictures, and a real loopback HTTP server that serves them (and the bad answers a
picture CDN can give).

The notes the tests read (``NOTES``) are shipped as PNGs in ``tests/pictures/``, so the tests
need no system font. They were drawn with Debian's fonts-wqy-microhei; after changing ``NOTES``,
install it (``apt-get install fonts-wqy-microhei``) and draw them again::

    .venv/bin/python -m tests.picture_server
"""

from __future__ import annotations

import io
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from memory_core.models import TurnInput
from memory_core.pictures import PictureRef
from memory_core.pictures.ocr import IDLE_STOP, READ_TIMEOUT, RapidOcrReader, TextReader

FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")
SHIPPED = Path(__file__).with_name("pictures")
PARCEL_NOTE = ("丰巢快递柜 取件码 8848", "请于今晚十点前取走")
NOTES: dict[str, tuple[str, ...]] = {
    "parcel": PARCEL_NOTE,
    "sticker-words": ("表情包",) * 8,
    "first-picture": ("第一张",),
    "meeting-tonight": ("晚上八点开会",),
    "pickup-code": ("取件码 5521",),
    "meeting-friday": ("会议改到周五",),
    "priority": ("优先级",),
    "first": ("第一",),
    "second": ("第二",),
    "third": ("第三",),
    "stalled": ("停滞",),
    "recovered": ("恢复",),
    "alive": ("活着",),
    "still-alive": ("还活着",),
}
"""Every note a test reads, by the name of its file in ``SHIPPED``."""


def fair_ocr(*, timeout: float = READ_TIMEOUT, idle_stop: float = IDLE_STOP) -> RapidOcrReader:
    """The real OCR at the tests' own priority (``niceness=0``), for a test whose subject is
    not the worker's priority (``test_ocr_priority.py`` keeps the shipped one).

    The bot's OCR runs at nice +10 so that replies come first. A test run keeps both cores
    busy (its workers, bots and PostgreSQL servers; on a shared machine other people's work
    too), and there such a worker gets a tenth of a share or less: a note's ~2 s of CPU took
    60-150 s and ran past the read's 120 s bound (2026-12-08 at load 10-17, twelve picture
    tests failed so, their workers killed and the CPU spent on them lost)."""
    return RapidOcrReader(niceness=0, timeout=timeout, idle_stop=idle_stop)


def note_picture(lines: tuple[str, ...] = PARCEL_NOTE) -> bytes:
    """The shipped PNG of a note in ``NOTES``: black Chinese text on white, like a screenshot."""
    name = next((name for name, said in NOTES.items() if said == lines), None)
    if name is None:
        raise LookupError(
            f"no shipped picture says {lines!r}: add it to NOTES in tests/picture_server.py "
            "and draw the pictures again (python -m tests.picture_server)"
        )
    return (SHIPPED / f"{name}.png").read_bytes()


def draw_note(lines: tuple[str, ...], *, fmt: str = "PNG") -> bytes:
    """A note drawn now, with the system font ``FONT`` (Debian's fonts-wqy-microhei): for
    drawing ``NOTES`` again and for benches that need notes of any text; tests read
    ``note_picture``."""
    font = ImageFont.truetype(str(FONT), 36)
    image = Image.new("RGB", (640, 80 + 70 * len(lines)), "white")
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(lines):
        draw.text((20, 40 + 70 * i), line, font=font, fill="black")
    out = io.BytesIO()
    image.save(out, fmt, optimize=True)
    return out.getvalue()


def draw_notes() -> None:
    """Draw every note of ``NOTES`` into ``SHIPPED``, and drop the files of notes gone."""
    SHIPPED.mkdir(exist_ok=True)
    for stale in set(SHIPPED.glob("*.png")) - {SHIPPED / f"{n}.png" for n in NOTES}:
        stale.unlink()
    for name, lines in NOTES.items():
        (SHIPPED / f"{name}.png").write_bytes(draw_note(lines))


def blank_picture(size: tuple[int, int] = (64, 64), fmt: str = "GIF") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, "orange").save(out, fmt)
    return out.getvalue()


class PictureServer:
    """Serves ``pictures[path]`` as image/png; and ``/missing`` (404), ``/page`` (HTML),
    ``/loop`` (redirects to itself), ``/hop/N`` (N redirects, then ``/note.png``),
    ``/huge`` (a Content-Length above any cap, and a body that never comes), ``/stall`` (no
    answer at all while the test runs), ``/endless`` (no
    Content-Length, a body larger than ``endless_bytes``). ``hits`` counts requests by path,
    ``first_hit`` holds when each path was first asked for (``time.monotonic``)."""

    def __init__(self, pictures: dict[str, bytes], *, endless_bytes: int = 200_000) -> None:
        self.pictures = dict(pictures)
        self.hits: Counter[str] = Counter()
        self.first_hit: dict[str, float] = {}
        self._release = threading.Event()
        self.stalled = threading.Event()  # someone asked for /stall
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *args: object) -> None:
                return None

            def do_GET(self) -> None:
                path = self.path
                outer.hits[path] += 1
                outer.first_hit.setdefault(path, time.monotonic())
                if path in outer.pictures:
                    self._answer(200, outer.pictures[path], "image/png")
                elif path == "/loop":
                    self._redirect("/loop")
                elif path.startswith("/hop/"):
                    left = int(path.rsplit("/", 1)[1])
                    self._redirect(f"/hop/{left - 1}" if left > 1 else "/note.png")
                elif path == "/page":
                    self._answer(200, b"<html><body>not a picture</body></html>", "text/html")
                elif path == "/huge":
                    self.send_response(200)
                    self.send_header("Content-Type", "image/png")
                    self.send_header("Content-Length", str(10**9))
                    self.end_headers()
                    self.wfile.write(b"\x89PNG\r\n\x1a\n")
                    self.wfile.flush()
                    outer._release.wait(60)  # the rest never comes while the test runs
                elif path == "/stall":
                    outer.stalled.set()
                    outer._release.wait(60)  # no answer while the test runs
                elif path == "/endless":
                    self.send_response(200)
                    self.send_header("Content-Type", "image/png")
                    self.end_headers()
                    chunk = b"\x89PNG\r\n\x1a\n" + b"\0" * 8184
                    for _ in range(endless_bytes // len(chunk) + 2):
                        self.wfile.write(chunk)
                else:
                    self._answer(404, b"not found", "text/plain")

            def _redirect(self, to: str) -> None:
                self.send_response(302)
                self.send_header("Location", to)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _answer(self, status: int, body: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def close(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()


class CountingReader:
    """A text reader (the real OCR), counting the pictures it was asked to read."""

    def __init__(self, inner: TextReader) -> None:
        self.inner = inner
        self.calls = 0

    async def read(self, picture: bytes) -> list[str]:
        self.calls += 1
        return await self.inner.read(picture)


def picture_turn(
    user: int, url: str, group: int | None = None, *, text: str = "帮我记一下", mid: int = 1
) -> tuple[TurnInput, list[PictureRef]]:
    """A message of ``text`` and one picture at ``url``, as the plugin hands it over."""
    segments = [
        {"type": "text", "data": {"text": text}},
        {"type": "image", "data": {"file": "x.png", "url": url, "sub_type": 0, "summary": ""}},
    ]
    turn = TurnInput(
        user_id=user,
        group_id=group,
        role="user",
        content=f"{text}[图片]",
        message_id=mid,
        self_id=10001,
        raw_segments=segments,
    )
    return turn, [PictureRef(position=0, placeholder="[图片]", url=url)]


if __name__ == "__main__":
    if not FONT.is_file():
        sys.exit(f"{FONT} is missing: apt-get install fonts-wqy-microhei")
    draw_notes()
    print(f"drew {len(NOTES)} notes into {SHIPPED}")
