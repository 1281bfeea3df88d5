"""A large picture is reduced as it is decoded: a PNG in bands of rows that put together are the
picture Pillow decodes whole, in every colour type; the memory of decoding a 6,300 x 6,300 RGBA
PNG stays well under one full-size copy of it; a WebP too large to decode whole is refused from
its header, before Pillow's decoder takes its canvases."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from memory_core.errors import PictureError
from memory_core.pictures import decoding
from memory_core.pictures.decoding import decoded
from tests.big_pictures import text_on_transparent

WIDTH, HEIGHT = 301, 257


def _gradient_with_noise() -> Image.Image:
    """Rows that make the encoder pick every filter (Sub, Up, Average, Paeth), each row's
    decoding depending on the row above."""
    rng = np.random.default_rng(7)
    pixels = rng.integers(0, 256, (HEIGHT, WIDTH, 4), dtype=np.uint8)
    ramp = np.add.outer(np.arange(HEIGHT), np.arange(WIDTH)) % 256
    pixels[:, : WIDTH // 2, :3] = ramp[:, : WIDTH // 2, None].astype(np.uint8)
    return Image.fromarray(pixels, "RGBA")


def _png(image: Image.Image, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG", **options)
    return out.getvalue()


IMAGE = _gradient_with_noise()
PNGS = {
    "RGBA": _png(IMAGE),
    "RGB": _png(IMAGE.convert("RGB")),
    "grey": _png(IMAGE.convert("L")),
    "grey and alpha": _png(IMAGE.convert("LA")),
    "palette": _png(IMAGE.convert("RGB").quantize(200)),
    "palette with a transparent index": _png(IMAGE.convert("RGB").quantize(200), transparency=3),
    "RGB with a transparent colour": _png(IMAGE.convert("RGB"), transparency=(1, 2, 3)),
}


@pytest.mark.parametrize("picture", list(PNGS.values()), ids=list(PNGS))
def test_png_bands_put_together_are_the_picture_pillow_decodes_whole(
    picture: bytes, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(decoding, "BAND_PIXELS", WIDTH * 10)  # bands of 10 rows
    bands = decoding._png_bands(picture, 1)
    assert bands is not None
    tops, images = zip(*bands, strict=True)
    assert tops == tuple(range(0, HEIGHT, 10))
    with Image.open(io.BytesIO(picture)) as whole:
        whole.load()
        assert {band.mode for band in images} == {whole.mode}
        assert all(
            band.info.get("transparency") == whole.info.get("transparency") for band in images
        )
        together = np.concatenate([np.asarray(band) for band in images])
        assert np.array_equal(together, np.asarray(whole))


def test_a_png_reduced_in_bands_is_the_picture_reduced_whole():
    picture = _png(IMAGE.resize((WIDTH * 10, HEIGHT * 10)))
    banded = decoded(picture).astype(int)
    with Image.open(io.BytesIO(picture)) as whole:
        # What Pillow's ``thumbnail`` does: a whole-factor shrink, then bicubic to the size.
        whole = whole.resize(banded.shape[1::-1], Image.Resampling.BICUBIC, reducing_gap=2.0)
        white = Image.new("RGB", whole.size, "white")
        white.paste(whole, mask=whole.getchannel("A"))
    at_once = np.asarray(white)[:, :, ::-1].astype(int)
    assert banded.shape == at_once.shape
    assert np.abs(banded - at_once).max() <= 3  # rounding of the two resizes' steps


# Run in a fresh interpreter: its peak resident size is this decoding's, not the test run's.
_DECODE_PEAK = """
import json, sys
from memory_core.pictures.decoding import decoded
picture = sys.stdin.buffer.read()
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
open("/proc/self/clear_refs", "w").write("5")
before = status("VmRSS")
shape = decoded(picture).shape
print(json.dumps({"grew": status("VmHWM") - before, "shape": shape}))
"""


def test_decoding_a_6300_square_rgba_png_takes_less_than_one_full_size_copy_of_it():
    picture = text_on_transparent()
    done = subprocess.run(
        [sys.executable, "-c", _DECODE_PEAK], input=picture, capture_output=True, check=True
    )
    measured = json.loads(done.stdout)
    assert measured["shape"] == [1440, 1440, 3]
    # Pillow's whole decode is 6300 x 6300 x 4 bytes (159 MB), and reducing an RGBA picture
    # made a second copy: 366 MB grown before (bench/RESULTS.md, 2026-12-08).
    assert measured["grew"] < 6300 * 6300 * 4 * 0.75, measured


def test_a_webp_too_large_to_decode_whole_is_refused_from_its_header():
    picture = text_on_transparent(2600, "WEBP", enlarged=1)
    assert decoding._webp_size(picture) == (2600, 2600)
    with pytest.raises(PictureError, match="too large to decode whole") as refused:
        decoded(picture)
    assert refused.value.lasting
    small = text_on_transparent(800, "WEBP", enlarged=1)
    assert decoded(small).shape == (800, 800, 3)
