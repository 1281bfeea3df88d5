"""What the bot knows of each picture of a message before and after reading it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from .text import derived_label, with_labels

READ = "read"
REFUSED = "refused"  # fetching or decoding failed for good (too big, not a picture, gone)
SKIPPED = "skipped"  # not read now (budget, a full queue, a timeout): tried again later
DECLINED = "declined"  # not read by policy (a sticker too big): never tried again

Locate = Callable[[], Awaitable[str | None]]
"""Asks the QQ client where a picture is (``get_image``) when its segment names no URL."""

StoredLocator = Callable[[int | None, str], Locate | None]
"""Where the QQ client of bot account ``self_id`` keeps a picture named ``file``: how a stored
turn's picture without a URL is found again (the plugin's ``get_image``); ``None``: nowhere."""


@dataclass(frozen=True)
class PictureRef:
    """One picture of a message, as the plugin found it in the message's segments."""

    position: int  # its place among the message's pictures, from 0
    placeholder: str  # how the turn's text shows it until it is read: "[图片]", "[动画表情]"
    url: str | None = None
    file_key: str | None = None  # the client's name of it when that is a content digest
    sticker: bool = False
    declared_size: int | None = None  # the segment's file_size, when it says
    locate: Locate | None = None


@dataclass(frozen=True)
class Reading:
    """What became of one picture."""

    ref: PictureRef
    status: str
    text: str = ""
    sha256: bytes | None = None
    reason: str = ""
    description: str = ""  # what a vision model said it shows (VISION_MODEL), if one is set

    @property
    def label(self) -> str:
        return derived_label(self.ref.placeholder, self.text, self.description)


@dataclass
class PictureJob:
    """The pictures of one message, read in the background; ``wait`` for them a while."""

    refs: Sequence[PictureRef]
    done: asyncio.Future[list[Reading]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    in_text: bool = False  # the labels went into the turn's text before it was stored

    async def wait(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the readings; whether they are there."""
        if timeout > 0 and not self.done.done():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.done), timeout)
        return self.done.done()

    def labelled(self, content: str) -> str:
        """``content`` with the pictures' labels if they are read by now, else unchanged."""
        if not self.done.done() or self.done.cancelled():
            return content
        labelled = with_labels(content, self.labels(self.done.result()))
        if labelled is None:
            return content
        self.in_text = True
        return labelled

    @staticmethod
    def labels(readings: Sequence[Reading]) -> list[tuple[str, str]]:
        return [(r.ref.placeholder, r.label) for r in readings]
