"""A person's own view of their memories: list them, delete some, take them away.

These back the self-service commands (/我的记忆, /忘记 3, /导出我的记忆); each works on one
person's rows only. Forgetting a person everywhere is ``TemporalMemory.forget(user_id=…)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from .distill.memory import DistilledKind, DistilledMemory
from .models import Forgotten, generate_session_key

if TYPE_CHECKING:
    from .service import TemporalMemory

LISTED_KINDS: tuple[DistilledKind, ...] = ("facts", "preferences")
LIST_LIMIT = 200


async def known_about(
    memory: TemporalMemory,
    user_id: int,
    group_id: int | None,
    *,
    limit: int = LIST_LIMIT,
    now: datetime | None = None,
) -> list[DistilledMemory]:
    """The current facts and preferences about ``user_id`` in this chat, newest first
    (last confirmed, then last stored)."""
    now = now or datetime.now(timezone.utc)
    found: list[DistilledMemory] = []
    for kind in LISTED_KINDS:
        found += await memory.distilled.recall_by_type(
            user_id, group_id, kind, limit=limit, now=now
        )
    # recall_by_type may widen to the user's other chats (MEMORY_DISTILLED_SCOPE=user); a
    # listing of this chat shows this chat's rows, the ones a delete from here can reach.
    session_key = generate_session_key(user_id, group_id)
    own = [m for m in found if m.session_key == session_key]
    own.sort(key=lambda m: (m.last_confirmed, m.id), reverse=True)
    return own[:limit]


async def forget_memories(
    memory: TemporalMemory, user_id: int, group_id: int | None, ids: Sequence[int]
) -> Forgotten:
    """Delete these distilled memories of ``user_id`` in this chat (others' rows and other
    chats' rows are never touched); returns how many of each kind went."""
    by_kind = await memory.distilled.store().delete_own(
        ids, user_id=user_id, session_key=generate_session_key(user_id, group_id)
    )
    return Forgotten(
        facts=by_kind.get("facts", 0),
        preferences=by_kind.get("preferences", 0),
        summaries=by_kind.get("summary", 0),
    )
