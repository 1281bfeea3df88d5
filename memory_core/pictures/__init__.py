"""Pictures remembered: what a screenshot or photo says, read offline and kept in its turn.

A picture is stored as ``[图片]`` with its turn at once; :class:`PictureReader` fetches it
(``fetch``), reads its text (``ocr``, PP-OCRv4 shipped in ``rapidocr-onnxruntime``) in the
background and writes ``[图片：文字 …]`` into the turn (``text``), which is then searched by
both channels. The bytes are never kept, only their hash (``store``, migration 014), so a
picture seen again is not read again. Since the text lives in the turn's own row, it is scoped,
recalled, exported and forgotten (撤回, /forget, expiry, the console) exactly like the turn.
With ``MEMORY_IMAGE_ENABLED=false`` the reader is :class:`PicturesOff`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..background import RepeatedStep
from ..models import MemoryTurn, TurnInput
from .reader import PictureReader
from .reading import PictureJob, PictureRef, Reading, StoredLocator
from .segments import image_placeholder, is_sticker, picture_refs
from .text import DERIVED_LABEL, derived_label, with_labels

if TYPE_CHECKING:
    from ..parts import MemoryParts
    from ..settings import MemorySettings
    from ..traffic import ReplyTraffic


class PicturesOff:
    """Pictures are not read: every message keeps its ``[图片]``."""

    async def start(
        self, turn: TurnInput, refs: Sequence[PictureRef], *, urgent: bool = False
    ) -> PictureJob | None:
        return None

    def follow(self, job: PictureJob, stored: MemoryTurn) -> None:
        return None

    async def settled(self) -> None:
        return None

    def background_steps(self) -> tuple[RepeatedStep, ...]:
        return ()

    async def aclose(self) -> None:
        return None


def build_picture_reader(
    settings: MemorySettings,
    parts: MemoryParts,
    traffic: ReplyTraffic | None = None,
    locator: StoredLocator | None = None,
) -> PictureReader | PicturesOff:
    """The reader ``MEMORY_IMAGE_*`` describe, or :class:`PicturesOff`; ``traffic``: the
    replies its reading yields to (the engine's); ``locator``: where a stored picture without
    a URL is (the front end's client)."""
    if not settings.memory_image_enabled:
        return PicturesOff()
    return PictureReader.from_settings(settings, parts, traffic, locator)


__all__ = [
    "DERIVED_LABEL",
    "PictureJob",
    "PictureReader",
    "PictureRef",
    "PicturesOff",
    "Reading",
    "StoredLocator",
    "build_picture_reader",
    "derived_label",
    "image_placeholder",
    "is_sticker",
    "picture_refs",
    "with_labels",
]
