"""The pictures of a message, for the core's ``PictureReader``: where each one is, whether it is
a sticker, how the turn's text shows it; and the two moments the handlers hand them over.

A picture's address is its segment's ``url`` (NapCat, Lagrange, go-cqhttp all send one); only
when there is none is the QQ client asked with ``get_image``, and only when the picture is
read. The client's name of a picture (``file``) is taken as its identity only when it is a
content digest (NapCat's ``<md5>.jpg``), so a sticker sent again is known before it is fetched.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from nonebot.adapters.onebot.v11 import ActionFailed, Bot, MessageEvent, NetworkError
from nonebot.adapters.onebot.v11.exception import ApiNotAvailable
from nonebot.log import logger

from memory_core import Locate, MemoryTurn, PictureJob, PictureRef, TurnInput

from .intake import segments_of
from .runtime import Runtime
from .segments import is_sticker, segment_to_text

_DIGEST_NAME = re.compile(r"^([0-9a-fA-F]{32}|[0-9a-fA-F]{40}|[0-9a-fA-F]{64})(\.\w{1,5})?$")
_ADDRESS = ("http://", "https://", "base64://")


def _size(value: Any) -> int | None:
    text = str(value if value is not None else "").strip()
    return int(text) if text.isdigit() else None


def picture_refs(segments: Sequence[Mapping[str, Any]], bot: Bot | None = None) -> list[PictureRef]:
    """The ``image`` segments of a message as the core reads them, in order (``bot``: the
    client to ask where a picture without a ``url`` is)."""
    refs: list[PictureRef] = []
    for segment in segments:
        if not isinstance(segment, Mapping) or segment.get("type") != "image":
            continue
        data = segment.get("data")
        data = data if isinstance(data, Mapping) else {}
        file = str(data.get("file") or "").strip()
        url = str(data.get("url") or "").strip()
        if not url.startswith(_ADDRESS):
            url = file if file.startswith(_ADDRESS) else ""
        digest = _DIGEST_NAME.match(file)
        refs.append(
            PictureRef(
                position=len(refs),
                placeholder=segment_to_text(segment),
                url=url or None,
                file_key=digest.group(1).lower() if digest else None,
                sticker=is_sticker(data),
                declared_size=_size(data.get("file_size")),
                locate=_locator(bot, file) if not url and file and bot is not None else None,
            )
        )
    return refs


def _locator(bot: Bot, file: str) -> Locate:
    async def locate() -> str | None:
        try:
            info = await bot.get_image(file=file)
        except (ActionFailed, NetworkError, ApiNotAvailable) as exc:
            logger.debug(f"get_image of {file} failed: {exc!r}")
            return None
        if not isinstance(info, dict):
            return None
        url = str(info.get("url") or "")
        if url.startswith(("http://", "https://")):
            return url
        encoded = str(info.get("base64") or "")
        return f"base64://{encoded}" if encoded else None

    return locate


async def start_reading(
    bot: Bot, event: MessageEvent, turn: TurnInput, runtime: Runtime
) -> PictureJob | None:
    """Queue the message's own pictures (not a quoted message's) for reading."""
    return await runtime.pictures.start(turn, picture_refs(segments_of(event.message), bot))


class OwnPictures:
    """A message's pictures for a reply: queued, then waited for a moment (``wait`` seconds,
    ``MEMORY_IMAGE_REPLY_WAIT``) in the session's turn, so the model sees what they say; what
    is not read by then still follows into the stored turn (:meth:`stored`)."""

    def __init__(self, bot: Bot, event: MessageEvent, runtime: Runtime, wait: float) -> None:
        self._bot, self._event, self._runtime, self._wait = bot, event, runtime, wait
        self.job: PictureJob | None = None

    async def __call__(self, turn: TurnInput) -> TurnInput:
        self.job = await start_reading(self._bot, self._event, turn, self._runtime)
        if self.job is None or not await self.job.wait(self._wait):
            return turn
        return dataclasses.replace(turn, content=self.job.labelled(turn.content))

    def stored(self, turn: MemoryTurn | None) -> None:
        after_stored(self._runtime, self.job, turn)


def after_stored(runtime: Runtime, job: PictureJob | None, stored: MemoryTurn | None) -> None:
    """Hand the stored turn to its pictures' job (nothing when it was not stored)."""
    if job is not None and stored is not None:
        runtime.pictures.follow(job, stored)
