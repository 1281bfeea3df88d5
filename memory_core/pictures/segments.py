"""A message's pictures as the reader takes them, from its OneBot v11 segments: the fresh
message's (the plugin) or the stored turn's ``raw_segments`` (a retry, ``PictureReader``).

Segments are plain dicts as NapCat, Lagrange and go-cqhttp send them. A picture's address is its
segment's ``url`` (or a ``file`` that is one); when there is none, ``locator`` (the plugin's
``get_image``) is asked for it, and only when the picture is read. The client's name of a picture
(``file``) is taken as its identity only when it is a content digest (NapCat's ``<md5>.jpg``),
so a sticker sent again is known before it is fetched.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .reading import Locate, PictureRef

Locator = Callable[[str], Locate | None]
"""Where the QQ client keeps a picture of this name (``file``), asked when it is read."""

_DIGEST_NAME = re.compile(r"^([0-9a-fA-F]{32}|[0-9a-fA-F]{40}|[0-9a-fA-F]{64})(\.\w{1,5})?$")
_ADDRESS = ("http://", "https://", "base64://")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _summary(data: Mapping[str, Any]) -> str:
    return " ".join(_text(data.get("summary")).split())


def is_sticker(data: Mapping[str, Any]) -> bool:
    """Whether an image segment's ``data`` is a sticker: ``sub_type`` 1 on most clients,
    NapCat's ``[动画表情]`` summary."""
    return _text(data.get("sub_type")).strip() == "1" or _summary(data) == "[动画表情]"


def image_placeholder(data: Mapping[str, Any]) -> str:
    """How a turn's text shows an image segment until it is read: the client's own short
    bracketed summary (NapCat's ``[动画表情]``), ``[动画表情]`` for a sticker, else ``[图片]``."""
    summary = _summary(data)
    if summary.startswith("[") and summary.endswith("]") and len(summary) <= 20:
        return summary
    return "[动画表情]" if is_sticker(data) else "[图片]"


def _size(value: Any) -> int | None:
    text = _text(value).strip()
    return int(text) if text.isdigit() else None


def picture_refs(
    segments: Sequence[Mapping[str, Any]] | None, locator: Locator | None = None
) -> list[PictureRef]:
    """The ``image`` segments of a message as the reader takes them, in order."""
    refs: list[PictureRef] = []
    for segment in segments or ():
        if not isinstance(segment, Mapping) or segment.get("type") != "image":
            continue
        data = segment.get("data")
        data = data if isinstance(data, Mapping) else {}
        file = _text(data.get("file")).strip()
        url = _text(data.get("url")).strip()
        if not url.startswith(_ADDRESS):
            url = file if file.startswith(_ADDRESS) else ""
        digest = _DIGEST_NAME.match(file)
        refs.append(
            PictureRef(
                position=len(refs),
                placeholder=image_placeholder(data),
                url=url or None,
                file_key=digest.group(1).lower() if digest else None,
                sticker=is_sticker(data),
                declared_size=_size(data.get("file_size")),
                locate=locator(file) if not url and file and locator is not None else None,
            )
        )
    return refs
