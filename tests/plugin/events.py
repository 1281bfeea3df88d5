"""OneBot v11 event payloads shaped like NapCat's (segment arrays) and go-cqhttp's (CQ strings).

Field sets follow shared/onebot/impl_event_shapes_from_source.json. Used by the nonebug tests
(validated into adapter events) and by the wire tests (sent as JSON).
"""

from __future__ import annotations

import itertools
import time
from typing import Any

SELF_ID = 10001
SUPERUSER_ID = 99999

_ids = itertools.count(1_494_600_000)


def next_message_id() -> int:
    return next(_ids)


def text_seg(text: str) -> dict[str, Any]:
    return {"type": "text", "data": {"text": text}}


def at_seg(qq: int | str) -> dict[str, Any]:
    return {"type": "at", "data": {"qq": str(qq)}}


def reply_seg(message_id: int) -> dict[str, Any]:
    return {"type": "reply", "data": {"id": str(message_id)}}


def _cq_escape(text: str, *, comma: bool = False) -> str:
    text = text.replace("&", "&amp;").replace("[", "&#91;").replace("]", "&#93;")
    return text.replace(",", "&#44;") if comma else text


def to_cq(segments: list[dict[str, Any]]) -> str:
    """Segments as a go-cqhttp CQ-code string (text escaped the way go-cqhttp does)."""
    parts = []
    for seg in segments:
        if seg["type"] == "text":
            parts.append(_cq_escape(seg["data"]["text"]))
        else:
            params = ",".join(
                f"{k}={_cq_escape(str(v), comma=True)}" for k, v in (seg["data"] or {}).items()
            )
            parts.append(f"[CQ:{seg['type']}{',' + params if params else ''}]")
    return "".join(parts)


def message_payload(
    segments: list[dict[str, Any]],
    *,
    user_id: int = 20002,
    group_id: int | None = None,
    message_id: int | None = None,
    nickname: str = "Alice",
    card: str = "",
    cq_string: bool = False,
    sent_at: float | None = None,
    self_id: int = SELF_ID,
) -> dict[str, Any]:
    """A private (no ``group_id``) or group message event."""
    raw = to_cq(segments)
    payload: dict[str, Any] = {
        "self_id": self_id,
        "user_id": user_id,
        "time": int(sent_at if sent_at is not None else time.time()),
        "message_id": message_id if message_id is not None else next_message_id(),
        "message_seq": 1,
        "real_id": 1,
        "message_type": "group" if group_id is not None else "private",
        "sender": {"user_id": user_id, "nickname": nickname, "card": card},
        "raw_message": raw,
        "font": 14 if not cq_string else 0,
        "sub_type": "normal" if group_id is not None else "friend",
        "message": raw if cq_string else segments,
        "post_type": "message",
    }
    if group_id is not None:
        payload["group_id"] = group_id
        payload["sender"]["role"] = "member"
    if not cq_string:
        payload["message_format"] = "array"
    return payload


def recall_payload(
    message_id: int, *, user_id: int, group_id: int | None = None, self_id: int = SELF_ID
) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "time": int(time.time()),
        "self_id": self_id,
        "post_type": "notice",
        "user_id": user_id,
        "message_id": message_id,
    }
    if group_id is None:
        payload["notice_type"] = "friend_recall"
    else:
        payload.update(notice_type="group_recall", group_id=group_id, operator_id=user_id)
    return payload


def self_sent_payload(text: str, *, group_id: int, self_id: int = SELF_ID) -> dict[str, Any]:
    """NapCat with reportSelfMessage: the bot's own message as ``message_sent``."""
    payload = message_payload([text_seg(text)], user_id=self_id, group_id=group_id)
    payload["post_type"] = "message_sent"
    payload["message_sent_type"] = "self"
    return payload
