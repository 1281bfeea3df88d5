"""A question about a picture ("刚才那张图", "上次那张截图") gets the chat's latest pictures first.

Meaning and keywords cannot find "that picture" (its text says nothing about being a picture
the person sent), so when a query names a picture, the retriever puts the latest turns of the
chat that carried a photo or screenshot (not a sticker) before every other anchor, newest first.
Only the session's own turns (the whole group's when it is shared): the scope of every recall.
"""

from __future__ import annotations

import re
from datetime import datetime

from ..storage.database_handle import Database
from .store import PgPictureStore

# How many of the latest pictures lead: "那张图" is almost always one of the last two.
LATEST_PICTURES = 2
_NAMES_A_PICTURE = re.compile(r"图片|截图|截屏|照片|相片|[那这哪张][张幅个]?图(?!书|表|纸|案|标)")


# What the bot wrote into a message in brackets ("[图片]", "[图片：文字 …]", "[回复 …]"): a
# message that carries a picture is not a question about an earlier one.
_BRACKETED = re.compile(r"\[[^\[\]]*\]")


def names_a_picture(query: str) -> bool:
    """Whether the query speaks of a picture (那张图, 截图, 照片…), not of 图书馆 or 地图, in
    the person's own words (not the ``[图片]`` a message carries)."""
    return bool(_NAMES_A_PICTURE.search(_BRACKETED.sub("", query)))


async def latest_pictures(
    database: Database,
    session_key: str,
    shared_group: int | None,
    now: datetime,
    limit: int = LATEST_PICTURES,
) -> list[tuple[int, datetime]]:
    """``(id, created_at)`` of the chat's latest live turns carrying a photo or screenshot,
    newest first."""
    return await database.store(PgPictureStore).latest_pictures(
        session_key, shared_group, now, limit
    )
