"""Pictures that are hard on a decoder: a header claiming more pixels than there are, and a
large mostly transparent picture with text (the OCR worker's tests and bench/pictures_bench)."""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image

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


def text_on_transparent(size: int = 6300, fmt: str = "PNG", enlarged: int = 5) -> bytes:
    """A large RGBA picture (a PNG unless ``fmt`` says), mostly transparent, with the parcel
    note's black text (enlarged five times unless ``enlarged`` says) on a transparent ground:
    under the pixel cap, ~1 GB of OCR memory before. The shipped note is its only text: no
    system font is needed."""
    note = Image.open(io.BytesIO(note_picture())).convert("L")
    note = note.resize((note.width * enlarged, note.height * enlarged), Image.Resampling.BICUBIC)
    ink = Image.new("RGBA", note.size, (0, 0, 0, 255))
    canvas = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    canvas.paste(ink, (size * 600 // 6300, size * 2600 // 6300), mask=note.point(lambda v: 255 - v))
    out = io.BytesIO()
    canvas.save(out, fmt, **({"lossless": True} if fmt == "WEBP" else {}))
    return out.getvalue()
