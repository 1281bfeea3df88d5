"""The memory's own JSON-lines format: an export that another installation imports as it was.

One JSON object a line, told apart by ``type``:

* ``header`` (first line): ``format`` ``"temporal-memory"``, ``version``, ``exported_at``, the
  ``sessions`` exported (``null``: all) and the ``embedding_model`` of the source (vectors are
  not exported; the importing side embeds with its own model).
* ``turn``: a stored turn — ``message_uuid``, ``user_id``, ``group_id``, ``self_id``, ``role``,
  ``content``, ``sender_name``, ``message_id``, ``created_at``, ``score``, ``expires_at``,
  ``raw_segments``. A line without ``type`` is a turn too, and only ``user_id``, ``role`` and
  ``content`` are required: that is the hand-written import format of earlier versions.
* ``memory``: a distilled fact, preference or summary with every field of its row, its
  ``sources`` (the ``message_uuid`` of each turn it was drawn from) and ``superseded_by`` (the
  exported ``id`` of its successor, for history rows).

Times are ISO 8601 in ``MEMORY_TIMEZONE`` with its offset (the clock the operator reads in the
console and the bot's replies); an import reads any offset. Turns come before the memories that
cite them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime, timezone, tzinfo
from typing import TYPE_CHECKING, Any

from ..dialogue.admin_store import ExportedTurn, PgAdminStore
from ..distill.memory import KINDS, DistilledMemory
from ..distill.store import PgDistilledStore, PortableMemory
from ..lang.text import scrub
from ..models import TurnInput, generate_session_key
from ..storage.paging import keyset_pages
from ..time_bounds import check_time

if TYPE_CHECKING:
    from ..parts import MemoryParts

FORMAT = "temporal-memory"
VERSION = 1
EXPORT_PAGE = 1000
# A OneBot message's segments nest a few levels (a forwarded chat inside a forwarded chat adds
# about five); far deeper is no message.
MAX_SEGMENT_DEPTH = 64


# ----------------------------------------------------------------------------- writing


def header_line(
    session_keys: Sequence[str] | None, embedding_model: str, now: datetime, tz: tzinfo
) -> dict[str, Any]:
    return {
        "type": "header",
        "format": FORMAT,
        "version": VERSION,
        "exported_at": _iso(now, tz),
        "sessions": None if session_keys is None else list(session_keys),
        "embedding_model": embedding_model,
    }


def _iso(value: datetime | None, tz: tzinfo) -> str | None:
    return value.astimezone(tz).isoformat() if value is not None else None


def turn_line(exported: ExportedTurn, tz: tzinfo) -> dict[str, Any]:
    turn = exported.turn
    return {
        "type": "turn",
        "message_uuid": turn.message_uuid,
        "session_key": turn.session_key,
        "user_id": turn.user_id,
        "group_id": turn.group_id,
        "self_id": turn.self_id,
        "role": turn.role,
        "content": turn.content,
        "sender_name": turn.sender_name,
        "message_id": turn.message_id,
        "created_at": _iso(turn.created_at, tz),
        "score": turn.score,
        "expires_at": _iso(turn.expires_at, tz),
        "raw_segments": exported.raw_segments,
    }


def memory_line(row: PortableMemory, tz: tzinfo) -> dict[str, Any]:
    m = row.memory
    return {
        "type": "memory",
        "id": m.id,
        "kind": m.kind,
        "session_key": m.session_key,
        "user_id": m.user_id,
        "group_id": m.group_id,
        "content": m.content,
        "category": m.category,
        "confidence": m.confidence,
        "strength": m.strength,
        "evidence": list(m.evidence),
        "key_topics": list(m.key_topics),
        "sentiment": m.sentiment,
        "action_items": list(m.action_items),
        "sources": list(row.source_uuids),
        "first_seen": _iso(m.first_seen, tz),
        "last_confirmed": _iso(m.last_confirmed, tz),
        "times_mentioned": m.times_mentioned,
        "base_importance": row.base_importance,
        "importance": m.importance,
        "access_count": m.access_count,
        "last_accessed_at": _iso(m.last_accessed_at, tz),
        "valid_until": _iso(m.valid_until, tz),
        "superseded_by": m.superseded_by,
        "created_at": _iso(m.created_at, tz),
    }


async def export_lines(
    parts: MemoryParts, session_keys: Sequence[str] | None = None
) -> AsyncIterator[dict[str, Any]]:
    """The export of these sessions (every session when ``None``), a line at a time: the
    header, the turns, then the distilled memories. Read page by page, so an export of any
    size streams (the CLI writes it to a file; a web page could send it as a download)."""
    tz = parts.tz
    yield header_line(session_keys, parts.embedder.model, datetime.now(timezone.utc), tz)
    turns = parts.database.store(PgAdminStore)
    turn_pages = keyset_pages(
        lambda last: turns.export_turns(session_keys, last, EXPORT_PAGE), lambda e: e.turn.id
    )
    async for page in turn_pages:
        for exported in page:
            yield turn_line(exported, tz)
    distilled = parts.database.store(PgDistilledStore)
    memory_pages = keyset_pages(
        lambda last: distilled.export_page(session_keys, last, EXPORT_PAGE), lambda m: m[0].id
    )
    async for memories in memory_pages:
        # Sources are named by message_uuid: row ids differ between databases.
        uuids = await turns.uuids_by_id({i for m, _ in memories for i in m.source_turn_ids})
        for m, base_importance in memories:
            sources = tuple(uuids[i] for i in sorted(set(m.source_turn_ids)) if i in uuids)
            yield memory_line(PortableMemory(m, base_importance, sources), tz)


# ----------------------------------------------------------------------------- reading


def _int(data: Mapping[str, Any], key: str, *, required: bool = False) -> int | None:
    value = data.get(key)
    if value is None:
        if required:
            raise ValueError(f"{key} is required")
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be an integer or null")
    return value


def _time(
    data: Mapping[str, Any], key: str, *, required: bool = False, said: bool = True
) -> datetime | None:
    """The ISO 8601 time at ``key``, inside ``time_bounds``' range (a time something was
    ``said`` no later than a day from now; an expiry may lie further ahead)."""
    value = data.get(key)
    if value is None:
        if required:
            raise ValueError(f"{key} is required")
        return None
    if not isinstance(value, str):
        raise ValueError(f"{key} must be an ISO 8601 time")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise ValueError(f"{key}: {exc}") from exc
    return check_time(parsed, key, now=datetime.now(timezone.utc) if said else None)


def _text(data: Mapping[str, Any], key: str, *, required: bool = False) -> str | None:
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string")
    return value


def _float(data: Mapping[str, Any], key: str, default: float | None = None) -> float | None:
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{key} must be a number")
    return float(value)


def _texts(data: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key} must be a list of strings")
    return tuple(value)


def _depth(value: Any) -> int:
    """How deeply lists and objects nest in ``value`` (counted without recursion: storing a
    turn walks its segments recursively, and a line nested ~900 deep ended the import)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            if depth <= MAX_SEGMENT_DEPTH:
                stack.extend((child, depth + 1) for child in children)
    return deepest


def line_type(data: Any) -> str:
    """``header``, ``turn`` or ``memory``; ``ValueError`` for anything else."""
    if not isinstance(data, Mapping):
        raise ValueError("each line must be a JSON object")
    kind = data.get("type", "turn")
    if kind not in ("header", "turn", "memory"):
        raise ValueError(f"unknown line type {kind!r} (header, turn or memory)")
    if kind == "header" and data.get("format") != FORMAT:
        raise ValueError(f"a header of another format ({data.get('format')!r}, not {FORMAT!r})")
    return str(kind)


def turn_from_json(data: Mapping[str, Any]) -> TurnInput:
    """A ``turn`` line -> ``TurnInput``, with a ValueError naming the bad field."""
    role = data.get("role")
    if role not in ("user", "assistant"):
        raise ValueError("role must be 'user' or 'assistant'")
    segments = data.get("raw_segments")
    if segments is not None and not (
        isinstance(segments, list) and all(isinstance(s, dict) for s in segments)
    ):
        raise ValueError("raw_segments must be a list of objects or null")
    if segments is not None and _depth(segments) > MAX_SEGMENT_DEPTH:
        raise ValueError(f"raw_segments are nested deeper than {MAX_SEGMENT_DEPTH} levels")
    return TurnInput(
        user_id=_int(data, "user_id", required=True) or 0,
        group_id=_int(data, "group_id"),
        role=role,
        content=_text(data, "content", required=True) or "",
        sender_name=_text(data, "sender_name"),
        message_id=_int(data, "message_id"),
        self_id=_int(data, "self_id"),
        created_at=_time(data, "created_at"),
        raw_segments=segments,
        message_uuid=_text(data, "message_uuid") or None,
    )


def retention_from_json(data: Mapping[str, Any]) -> tuple[int | None, datetime | None]:
    """A turn line's ``score`` and ``expires_at`` (both ``None`` when it was never scored)."""
    score = _int(data, "score")
    if score is not None and not 0 <= score <= 100:
        raise ValueError("score must be between 0 and 100")
    return score, _time(data, "expires_at", said=False)


def memory_from_json(data: Mapping[str, Any]) -> PortableMemory:
    """A ``memory`` line -> ``PortableMemory`` (its ``id`` and ``superseded_by`` are the
    exporting database's ids, used only to link history rows)."""
    kind = data.get("kind")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}")
    user_id = _int(data, "user_id", required=True) or 0
    group_id = _int(data, "group_id")
    first_seen = _time(data, "first_seen", required=True)
    assert first_seen is not None
    memory = DistilledMemory(
        id=_int(data, "id") or 0,
        kind=kind,
        session_key=generate_session_key(user_id, group_id),
        user_id=user_id,
        group_id=group_id,
        content=scrub(_text(data, "content", required=True) or ""),
        category=_text(data, "category"),
        confidence=_float(data, "confidence"),
        strength=_float(data, "strength"),
        evidence=_texts(data, "evidence"),
        key_topics=_texts(data, "key_topics"),
        sentiment=_text(data, "sentiment"),
        action_items=_texts(data, "action_items"),
        source_turn_ids=(),
        first_seen=first_seen,
        last_confirmed=_time(data, "last_confirmed") or first_seen,
        times_mentioned=_int(data, "times_mentioned") or 1,
        importance=_float(data, "importance", 0.5) or 0.0,
        access_count=_int(data, "access_count") or 0,
        last_accessed_at=_time(data, "last_accessed_at"),
        valid_until=_time(data, "valid_until", said=False),
        superseded_by=_int(data, "superseded_by"),
        created_at=_time(data, "created_at") or first_seen,
    )
    if not memory.content.strip():
        raise ValueError("content is empty")
    base = _float(data, "base_importance", memory.importance)
    return PortableMemory(memory, base if base is not None else 0.5, _texts(data, "sources"))
