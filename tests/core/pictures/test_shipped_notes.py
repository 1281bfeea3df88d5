"""The notes the picture tests read are shipped as files, so no test needs a system font."""

from __future__ import annotations

import pytest
from PIL import Image

from tests.picture_server import NOTES, SHIPPED, note_picture


def test_every_note_is_a_shipped_png_and_every_shipped_file_is_a_note():
    assert {path.name for path in SHIPPED.iterdir()} == {f"{name}.png" for name in NOTES}
    for name in NOTES:
        with Image.open(SHIPPED / f"{name}.png") as image:
            assert image.format == "PNG"


def test_a_note_that_was_never_drawn_says_how_to_draw_it():
    with pytest.raises(LookupError, match=r"python -m tests\.picture_server"):
        note_picture(("没画过的字",))
