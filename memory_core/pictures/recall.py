"""A question about a picture ("刚才那张图", "上次那张截图") gets the chat's latest pictures first.

Meaning and keywords cannot find "that picture" (its text says nothing about being a picture
the person sent), so when a query names a picture, the latest turns of the chat that carried a
photo or screenshot (not a sticker) go before every other anchor, newest first. Only the
session's own turns (the whole group's when it is shared): the same scope as every recall.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from ..recall.ranking import RankedAnchor
from ..storage.database_handle import Database
from ..storage.dialogue_store import AnchorCandidate, RecallScope
from .store import PgPictureStore

# How many of the latest pictures lead: "那张图" is almost always one of the last two.
LATEST_PICTURES = 2
_NAMES_A_PICTURE = re.compile(r"图片|截图|截屏|照片|相片|[那这哪张][张幅个]?图(?!书|表|纸|案|标)")


def names_a_picture(query: str) -> bool:
    """Whether the query speaks of a picture (那张图, 截图, 照片…), not of 图书馆 or 地图."""
    return bool(_NAMES_A_PICTURE.search(query))


async def pictures_first(
    database: Database,
    scope: RecallScope,
    ranked: Sequence[RankedAnchor],
    now: datetime,
    limit: int = LATEST_PICTURES,
) -> list[RankedAnchor]:
    """``ranked`` with the chat's latest picture turns (up to ``now``) moved to the front."""
    latest = await database.store(PgPictureStore).latest_pictures(
        scope.session_key, scope.shared_group, now, limit
    )
    if not latest:
        return list(ranked)
    score = max((a.score for a in ranked), default=1.0)
    first = [RankedAnchor(AnchorCandidate(i, at, 1.0), score) for i, at in latest]
    chosen = {i for i, _ in latest}
    return first + [a for a in ranked if a.candidate.id not in chosen]
