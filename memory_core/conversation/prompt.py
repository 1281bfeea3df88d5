"""The chat prompt: the time-aware system prompt and the chat messages (the memory block
itself is made in ``memory_core.context``).

Nothing here talks to a model or a database; every function is pure given its inputs, so the
exact text the model sees can be tested.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from ..context.block import time_key
from ..lang.timefmt import format_absolute, relative_time_zh, weekday_zh
from ..models import MemoryTurn

RECAP_AFTER = timedelta(hours=1)


def _elapsed(then: datetime, now: datetime) -> timedelta:
    if then.tzinfo is None or now.tzinfo is None:
        raise ValueError("datetimes must be timezone-aware")
    return now.astimezone(timezone.utc) - then.astimezone(timezone.utc)


@dataclass(frozen=True)
class ChatPlace:
    """Who speaks to the bot and where: a private chat, or a member in a (named) group."""

    user_id: int
    sender_name: str | None = None
    group_id: int | None = None
    group_name: str | None = None

    def describe(self) -> str:
        """One Chinese sentence for the system prompt."""
        who = (
            f"{self.sender_name}（QQ {self.user_id}）" if self.sender_name else f"QQ {self.user_id}"
        )
        if self.group_id is None:
            return f"这是与{who}的私聊。"
        group = (
            f"「{self.group_name}」（群号 {self.group_id}）"
            if self.group_name
            else (f"（群号 {self.group_id}）")
        )
        return (
            f"这是群聊{group}，现在对你说话的是群成员{who}。群里有很多人：只回应这位成员，"
            "不要把其他成员说过的话当成这位成员的。"
        )


def build_system_prompt(
    now: datetime,
    tz: ZoneInfo,
    *,
    bot_name: str | None = None,
    last_turn_at: datetime | None = None,
    persona: str | None = None,
    place: ChatPlace | None = None,
) -> str:
    """The Chinese system prompt: persona, who speaks where, current time with zone and
    weekday, time rules.

    The recap instruction appears only when ``last_turn_at`` is more than an hour before
    ``now``, and then names the gap (``上次对话在5小时前（…）``).
    """
    parts: list[str] = []
    if bot_name:
        parts.append(f"你是{bot_name}。")
    if persona and persona.strip():
        parts.append(persona.strip())
    if place is not None:
        parts.append(place.describe())
    parts.append(f"当前时间：{format_absolute(now, tz)}（{tz.key or tz}，{weekday_zh(now, tz)}）")
    parts.append(
        "回答时注意：\n"
        "- 记忆带时间戳；时间久远的信息可能已过时，必要时向用户确认。\n"
        "- 明天/昨天/刚才/下周等时间词：当前消息按当前时间理解，记忆里的按该条记忆的时间理解。\n"
        "- 那个/上次/它等指代，结合时间戳判断所指的内容。"
    )
    if last_turn_at is not None and _elapsed(last_turn_at, now) > RECAP_AFTER:
        gap = relative_time_zh(last_turn_at, now, tz)
        parts.append(
            f"- 上次对话在{gap}（{format_absolute(last_turn_at, tz)}），"
            "如与当前话题相关，可先用一两句话简要回顾之前的内容。"
        )
    return "\n".join(parts)


def _recent_stamp(moment: datetime, now: datetime, tz: ZoneInfo) -> str:
    local = moment.astimezone(tz)
    if local.date() == now.astimezone(tz).date():
        return local.strftime("%H:%M:%S")
    return format_absolute(moment, tz)


def build_chat_messages(
    system_prompt: str,
    memory_block: str,
    recent: Sequence[MemoryTurn],
    user_text: str,
    now: datetime,
    tz: ZoneInfo,
    *,
    sender_name: str | None = None,
) -> list[dict[str, str]]:
    """OpenAI chat messages for one reply.

    Shape: ``system`` (the system prompt, then a blank line and the memory block if any), then
    the short-term ``recent`` turns (which must not include the current message) as alternating
    ``user`` / ``assistant`` messages, then the current message as the last ``user`` message.

    - User turns are prefixed with their time: ``[HH:MM:SS]`` when on today's date in ``tz``,
      else the full ``[YYYY-MM-DD HH:MM:SS]``, and their sender's name when known
      (``[10:30:15] 小明: …``). The current message gets ``now``'s stamp and ``sender_name``.
      Assistant turns are not prefixed, so the model does not learn to start its replies with
      a stamp.
    - Consecutive turns of the same role are merged into one message, one turn per line, and
      leading assistant turns (whose question fell out of the recent window) are left out: some
      OpenAI-compatible servers reject messages that do not alternate or start with ``user``.
    """
    system = system_prompt if not memory_block else f"{system_prompt}\n\n{memory_block}"
    messages: list[dict[str, str]] = [{"role": "system", "content": system}]

    entries: list[tuple[str, str]] = []
    for turn in sorted(recent, key=time_key):
        if turn.role == "user":
            stamp = _recent_stamp(turn.created_at, now, tz)
            entries.append(("user", f"[{stamp}] {_said_by(turn.sender_name, turn.content)}"))
        elif entries:  # an assistant turn before any user turn is dropped
            entries.append(("assistant", turn.content))
    entries.append(("user", f"[{_recent_stamp(now, now, tz)}] {_said_by(sender_name, user_text)}"))

    for role, content in entries:
        last = messages[-1]
        if last["role"] == role:
            last["content"] = f"{last['content']}\n{content}"
        else:
            messages.append({"role": role, "content": content})
    return messages


def _said_by(sender_name: str | None, text: str) -> str:
    return f"{sender_name}: {text}" if sender_name else text
