"""The pictures of a message, for the core's ``PictureReader`` (``memory_core.pictures.segments``
reads them from the segments; a picture without a URL is located with the client's
``get_image``, ``locate``); and the two moments the handlers hand them over."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from nonebot.adapters.onebot.v11 import Bot, MessageEvent

from memory_core import MemoryTurn, PictureJob, PictureRef, TurnInput
from memory_core import picture_refs as core_picture_refs

from .intake import segments_of
from .locate import locate_with
from .runtime import Runtime


def picture_refs(segments: Sequence[Mapping[str, Any]], bot: Bot | None = None) -> list[PictureRef]:
    """The ``image`` segments of a message as the core reads them, in order (``bot``: the
    client to ask where a picture without a ``url`` is)."""
    return core_picture_refs(segments, None if bot is None else functools.partial(locate_with, bot))


async def start_reading(
    bot: Bot, event: MessageEvent, turn: TurnInput, runtime: Runtime, *, urgent: bool = False
) -> PictureJob | None:
    """Queue the message's own pictures (not a quoted message's) for reading (``urgent``: a
    reply waits for them, so they are not put off until the replies are quiet)."""
    refs = picture_refs(segments_of(event.message), bot)
    return await runtime.pictures.start(turn, refs, urgent=urgent)


class OwnPictures:
    """A message's pictures for a reply: queued, then waited for a moment (``wait`` seconds,
    ``MEMORY_IMAGE_REPLY_WAIT``) in the session's turn, so the model sees what they say; what
    is not read by then still follows into the stored turn (:meth:`stored`)."""

    def __init__(self, bot: Bot, event: MessageEvent, runtime: Runtime, wait: float) -> None:
        self._bot, self._event, self._runtime, self._wait = bot, event, runtime, wait
        self.job: PictureJob | None = None

    async def __call__(self, turn: TurnInput) -> TurnInput:
        urgent = self._wait > 0
        self.job = await start_reading(self._bot, self._event, turn, self._runtime, urgent=urgent)
        if self.job is None or not await self.job.wait(self._wait):
            return turn
        return dataclasses.replace(turn, content=self.job.labelled(turn.content))

    def stored(self, turn: MemoryTurn | None) -> None:
        after_stored(self._runtime, self.job, turn)


def after_stored(runtime: Runtime, job: PictureJob | None, stored: MemoryTurn | None) -> None:
    """Hand the stored turn to its pictures' job (nothing when it was not stored)."""
    if job is not None and stored is not None:
        runtime.pictures.follow(job, stored)
