"""A picture decoded for the OCR at its working size, never held whole at full size twice.

The OCR reads a picture at most ``WORK_SIDE`` on its longer side and ``WORK_PIXELS`` in all.
A larger picture is reduced as it is decoded, so the OCR worker's peak stays about that of a
phone screenshot whatever comes (issue 39; bench/RESULTS.md, 2026-12-08):

* a JPEG decodes straight at 1/2 to 1/8 of its size (Pillow's ``draft``);
* an 8-bit PNG that is not interlaced (screenshots, drawings: nearly every large PNG) is decoded
  in bands of rows, each its own small PNG: the rows of the band, after the band's previous row
  given unfiltered, since PNG filters read the row above. Pillow decodes a PNG whole before it
  can be reduced: 6,300 x 6,300 RGBA was 159 MB decoded, twice that while it was reduced;
* anything else (GIF, WebP, BMP, a 16-bit or an interlaced PNG) is decoded whole once and
  reduced a band at a time, so no second full-size copy is made; such a picture is read only
  when its decoding takes at most ``WHOLE_DECODE_BYTES`` (a WebP takes ~16 bytes a pixel in
  Pillow's decoder, two canvases and two copies; the others 1 or 4), and refused for good
  otherwise: 2,400 x 2,400 in WebP, 4,800 x 4,800 in 4-byte modes.

Each band is put on white where it is transparent and shrunk by a whole factor (box average);
the shrunk picture, still at least twice the working size, is then resized to it (bicubic):
Pillow's own ``thumbnail`` in two steps, the first one band at a time.
"""

from __future__ import annotations

import io
import struct
import warnings
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import PictureError

# A picture this large is not a chat screenshot; decoding it would cost more memory than
# reading it is worth (a 5 MB PNG can unpack to gigabytes). Checked from the header.
MAX_PIXELS = 40_000_000
# The size the OCR reads a picture at: RapidOCR itself shrinks a picture to 2,000 pixels on
# its longer side before anything else; a picture larger than a phone's screenshot is also
# reduced to that many pixels.
WORK_SIDE = 2000
WORK_PIXELS = 1080 * 1920
# The most a picture decoded whole may take (see above): with the worker's ~165 MB idle and the
# shrunk copy beside it, about the OCR's own peak on a screenshot (bench/RESULTS.md).
WHOLE_DECODE_BYTES = 96 * 1024 * 1024
# Pixels in one band (a few MB at 4 bytes a pixel), rounded to whole rows of the shrink factor.
BAND_PIXELS = 1_000_000
# The whole-factor shrink leaves at least this many times the working size for the final
# bicubic resize (Pillow's ``thumbnail`` default ``reducing_gap``: the quality of a fair
# resize from the full size).
REDUCING_GAP = 2.0

_WEBP_BYTES = 16
_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# PNG colour types (IHDR) and their channels at 8 bits.
_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}


def decoded(picture: bytes) -> np.ndarray:
    """The picture's first frame as a BGR array (what the OCR models take), at most
    ``WORK_SIDE`` on its longer side and ``WORK_PIXELS`` in all, transparency on white;
    ``PictureError`` (lasting) when Pillow cannot open it or it is too large to decode."""
    from PIL import Image

    # Pillow's WebP decoder takes its canvases when the file is opened: checked first.
    _check_whole(_webp_size(picture), _WEBP_BYTES)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(picture)) as image:
                width, height = image.size  # from the header: nothing is decoded yet
                if width * height > MAX_PIXELS:
                    raise PictureError(f"picture of {width}x{height} pixels is too large")
                rgb = _reduced(image, picture)
    except PictureError:
        raise
    except Exception as exc:  # Pillow's decoders raise many kinds; each means "not readable"
        raise PictureError(f"not a readable picture: {exc!r}") from exc
    array = np.asarray(rgb)
    return np.ascontiguousarray(array[:, :, ::-1])


def _reduced(image: Any, picture: bytes) -> Any:
    """``image``'s first frame in RGB at the OCR's working size."""
    from PIL import Image

    width, height = image.size
    scale = min(1.0, WORK_SIDE / max(width, height), (WORK_PIXELS / (width * height)) ** 0.5)
    if scale >= 1.0:
        image.load()
        return _on_white(image)
    box = (max(1, round(width * scale)), max(1, round(height * scale)))
    if image.format == "JPEG":
        # The smallest of 1/2 .. 1/8 still as large as ``box`` (thumbnail's own draft asks for
        # twice that, a full-size decode of a 6,000-pixel photo).
        image.draft("RGB", box)
        width, height = image.size
    factor = max(1, int(min(width / box[0], height / box[1]) / REDUCING_GAP))
    bands = _png_bands(picture, factor) if image.format == "PNG" else None
    if bands is None:
        if image.format != "JPEG":
            _check_whole(image.size, 1 if image.mode in ("1", "L", "P") else 4)
        image.load()
        bands = _cut(image, factor)
    shrunk = Image.new("RGB", (-(-width // factor), -(-height // factor)))
    for top, band in bands:
        shrunk.paste(_on_white(band).reduce(factor), (0, top // factor))
    if shrunk.size != box:
        shrunk = shrunk.resize(box, Image.Resampling.BICUBIC)
    return shrunk


def _check_whole(size: tuple[int, int] | None, per_pixel: int) -> None:
    if size is not None and size[0] * size[1] * per_pixel > WHOLE_DECODE_BYTES:
        raise PictureError(f"picture of {size[0]}x{size[1]} pixels is too large to decode whole")


def _webp_size(picture: bytes) -> tuple[int, int] | None:
    """A WebP's canvas from its header (None when it is not a WebP or says none)."""
    if picture[:4] != b"RIFF" or picture[8:12] != b"WEBP" or len(picture) < 30:
        return None
    kind = picture[12:16]
    if kind == b"VP8 " and picture[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", picture[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if kind == b"VP8X":
        width = int.from_bytes(picture[24:27], "little") + 1
        return width, int.from_bytes(picture[27:30], "little") + 1
    if kind == b"VP8L" and picture[20] == 0x2F:
        bits = int.from_bytes(picture[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


def _band_rows(width: int, factor: int) -> int:
    return max(factor, BAND_PIXELS // max(1, width) // factor * factor)


def _cut(image: Any, factor: int) -> Iterator[tuple[int, Any]]:
    """A decoded ``image`` in bands of rows (copies of a few MB each)."""
    width, height = image.size
    rows = _band_rows(width, factor)
    for top in range(0, height, rows):
        yield top, image.crop((0, top, width, min(height, top + rows)))


def _on_white(image: Any) -> Any:
    """``image`` in RGB; text drawn on a transparent ground has no colour under it: put on
    white, as a chat window shows it (and as RapidOCR does for a picture it opens itself)."""
    from PIL import Image

    if image.mode == "RGB":
        return image
    transparent = image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
    if not transparent:
        return image.convert("RGB")
    rgba = image if image.mode == "RGBA" else image.convert("RGBA")
    ground = Image.new("RGB", rgba.size, "white")
    ground.paste(rgba, mask=rgba.getchannel("A"))
    return ground


def _png_bands(picture: bytes, factor: int) -> Iterator[tuple[int, Any]] | None:
    """The PNG's rows in bands, each decoded on its own, or None when the PNG is not one that
    can be (not 8 bits a channel, interlaced, or its chunks not as expected)."""
    chunks = list(_chunks(picture))
    if not chunks or chunks[0][0] != b"IHDR" or len(chunks[0][1]) != 13:
        return None
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    if depth != 8 or interlace != 0 or colour not in _CHANNELS or width == 0:
        return None
    # What a band's small PNG needs besides its rows: the palette and the transparency.
    kept = [(kind, data) for kind, data in chunks if kind in (b"PLTE", b"tRNS")]
    data = (data for kind, data in chunks if kind == b"IDAT")
    return _decoded_bands(data, kept, width, height, colour, factor)


def _decoded_bands(
    idat: Iterator[bytes],
    kept: list[tuple[bytes, bytes]],
    width: int,
    height: int,
    colour: int,
    factor: int,
) -> Iterator[tuple[int, Any]]:
    from PIL import Image

    stride = width * _CHANNELS[colour]
    rows = _band_rows(width, factor)
    inflate = zlib.decompressobj()
    pending = b""
    above: bytes | None = None  # the previous band's last row, unfiltered
    for top in range(0, height, rows):
        count = min(rows, height - top)
        wanted = count * (stride + 1)
        filtered = [pending[:wanted]]
        got = len(filtered[0])
        pending = pending[wanted:]
        while got < wanted:
            source = inflate.unconsumed_tail or next(idat, b"")
            if not source:
                raise PictureError("PNG data ends early")
            piece = inflate.decompress(source, wanted - got)
            filtered.append(piece)
            got += len(piece)
        raw = b"".join(filtered)
        header_rows = count
        if above is not None:
            raw = b"\0" + above + raw  # filter "none": the row as it is
            header_rows += 1
        band_png = _png(width, header_rows, colour, kept, raw)
        with Image.open(io.BytesIO(band_png)) as opened:
            opened.load()
            band = opened.copy() if above is None else opened.crop((0, 1, width, header_rows))
        above = band.crop((0, count - 1, width, count)).tobytes()
        yield top, band


def _png(
    width: int, height: int, colour: int, kept: list[tuple[bytes, bytes]], raw: bytes
) -> bytes:
    """A PNG of ``raw`` rows (filtered, as in a PNG's data), stored without compressing."""
    header = struct.pack(">IIBBBBB", width, height, 8, colour, 0, 0, 0)
    parts = [_SIGNATURE, _chunk(b"IHDR", header)]
    parts += [_chunk(kind, data) for kind, data in kept]
    parts += [_chunk(b"IDAT", zlib.compress(raw, 0)), _chunk(b"IEND", b"")]
    return b"".join(parts)


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data).to_bytes(4, "big")
    return len(data).to_bytes(4, "big") + kind + data + crc


def _chunks(picture: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The PNG's chunks up to its image data's end (CRCs are Pillow's to check: it opened it)."""
    at = len(_SIGNATURE)
    while at + 8 <= len(picture):
        size = int.from_bytes(picture[at : at + 4], "big")
        kind = picture[at + 4 : at + 8]
        yield kind, picture[at + 8 : at + 8 + size]
        if kind == b"IEND":
            return
        at += 12 + size
