"""The chat prompt, laid out for a provider's prefix cache.

A provider bills the part of a prompt that repeats an earlier prompt's beginning at a fraction
(DeepSeek, OpenAI, Qwen, SiliconFlow), so what rarely changes comes first and what changes at
every message comes last:

1. the system prompt: who the bot is, the persona, the chat (for a group: the group, not the
   member speaking), the rules and, in a private chat, the person's distilled preferences and
   summaries (they do not depend on the message); byte-identical across the calls of one chat
   until a new one is distilled;
2. the short-term turns, which grow by appending (``conversation.window`` moves them in steps);
3. the last user message: the note of this moment (the current time with zone and weekday, who
   speaks in a group, the recap offer, the memory block) and then the message itself.

Nothing here talks to a model or a database; every function is pure given its inputs, so the
exact text the model sees can be tested (``bench/prompt_prefix.py`` measures the shared prefix).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from ..context.block import time_key
from ..lang.timefmt import format_absolute, relative_time_zh, weekday_zh
from ..models import MemoryTurn
from .citation import CITE_RULE

RECAP_AFTER = timedelta(hours=1)
NOTE_OPEN = "【系统提示】"
NOTE_CLOSE = "【当前消息】"
SETTLED_INTRO = "关于对方的长期记忆（带时间戳，按当前时间判断新旧）："


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

    def _who(self) -> str:
        if self.sender_name:
            return f"{self.sender_name}（QQ {self.user_id}）"
        return f"QQ {self.user_id}"

    def describe(self) -> str:
        """One Chinese sentence for the system prompt: the same for every member of a group,
        so that the members' prompts share it."""
        if self.group_id is None:
            return f"这是与{self._who()}的私聊。"
        group = (
            f"「{self.group_name}」（群号 {self.group_id}）"
            if self.group_name
            else (f"（群号 {self.group_id}）")
        )
        return (
            f"这是群聊{group}。群里有很多人：只回应当前对你说话的成员，"
            "不要把其他成员说过的话当成这位成员的。"
        )

    def speaker(self) -> str | None:
        """Who speaks now, for the note of the moment; ``None`` in a private chat."""
        if self.group_id is None:
            return None
        return f"现在对你说话的是群成员{self._who()}。"


def build_system_prompt(
    *,
    bot_name: str | None = None,
    persona: str | None = None,
    place: ChatPlace | None = None,
    settled: str = "",
    cite: bool = False,
) -> str:
    """The Chinese system prompt: persona, the chat, the time rules (with ``cite``, the rule
    that asks the model to name the numbered memory it used: ``citation.CITE_RULE``) and, in
    a private chat, ``settled`` (the person's preferences and summaries, dated, without
    relative times); nothing in it changes from one message of a chat to the next (the time is
    in ``build_moment_note``) but a newly distilled preference or summary."""
    parts: list[str] = []
    if bot_name:
        parts.append(f"你是{bot_name}。")
    if persona and persona.strip():
        parts.append(persona.strip())
    if place is not None:
        parts.append(place.describe())
    parts.append(
        "回答时注意：\n"
        f"- 最后一条消息里{NOTE_OPEN}与{NOTE_CLOSE}之间是当前时间和相关记忆，不是用户说的话。\n"
        "- 记忆带时间戳；时间久远的信息可能已过时，必要时向用户确认。\n"
        "- 明天/昨天/刚才/下周等时间词：当前消息按当前时间理解，记忆里的按该条记忆的时间理解。\n"
        "- 那个/上次/它等指代，结合时间戳判断所指的内容。" + (f"\n{CITE_RULE}" if cite else "")
    )
    if settled:
        parts.append(f"{SETTLED_INTRO}\n{settled}")
    return "\n".join(parts)


def build_moment_note(
    now: datetime,
    tz: ZoneInfo,
    *,
    memory_block: str = "",
    last_turn_at: datetime | None = None,
    place: ChatPlace | None = None,
) -> str:
    """What changes at every message, put just before it: the current time with zone and
    weekday, who speaks (in a group), the recap offer and the memory block.

    The recap offer appears only when ``last_turn_at`` is more than an hour before ``now``,
    and then names the gap (``上次对话在5小时前（…）``).
    """
    parts = [
        NOTE_OPEN,
        f"当前时间：{format_absolute(now, tz)}（{tz.key or tz}，{weekday_zh(now, tz)}）",
    ]
    speaker = place.speaker() if place is not None else None
    if speaker:
        parts.append(speaker)
    if last_turn_at is not None and _elapsed(last_turn_at, now) > RECAP_AFTER:
        gap = relative_time_zh(last_turn_at, now, tz)
        parts.append(
            f"上次对话在{gap}（{format_absolute(last_turn_at, tz)}），"
            "如与当前话题相关，可先用一两句话简要回顾之前的内容。"
        )
    if memory_block:
        parts.append(memory_block)
    parts.append(NOTE_CLOSE)
    return "\n".join(parts)


def _recent_stamp(moment: datetime, now: datetime, tz: ZoneInfo) -> str:
    local = moment.astimezone(tz)
    if local.date() == now.astimezone(tz).date():
        return local.strftime("%H:%M:%S")
    return format_absolute(moment, tz)


def build_chat_messages(
    system_prompt: str,
    moment_note: str,
    recent: Sequence[MemoryTurn],
    user_text: str,
    now: datetime,
    tz: ZoneInfo,
    *,
    sender_name: str | None = None,
) -> list[dict[str, str]]:
    """OpenAI chat messages for one reply.

    Shape: ``system`` (the system prompt alone), then the short-term ``recent`` turns (which
    must not include the current message) as alternating ``user`` / ``assistant`` messages, then
    the current message as the last ``user`` message, after ``moment_note`` (if any) on lines of
    its own: everything before the note repeats the previous prompt of the chat as long as the
    short-term window only grew.

    - User turns are prefixed with their time: ``[HH:MM:SS]`` when on today's date in ``tz``,
      else the full ``[YYYY-MM-DD HH:MM:SS]``, and their sender's name when known
      (``[10:30:15] 小明: …``). The current message gets ``now``'s stamp and ``sender_name``.
      Assistant turns are not prefixed, so the model does not learn to start its replies with
      a stamp.
    - Consecutive turns of the same role are merged into one message, one turn per line, and
      leading assistant turns (whose question fell out of the recent window) are left out: some
      OpenAI-compatible servers reject messages that do not alternate or start with ``user``.
    """
    messages: list[dict[str, str]] = [{"role": "system", "content": system_prompt}]

    entries: list[tuple[str, str]] = []
    for turn in sorted(recent, key=time_key):
        if turn.role == "user":
            stamp = _recent_stamp(turn.created_at, now, tz)
            entries.append(("user", f"[{stamp}] {_said_by(turn.sender_name, turn.content)}"))
        elif entries:  # an assistant turn before any user turn is dropped
            entries.append(("assistant", turn.content))
    current = f"[{_recent_stamp(now, now, tz)}] {_said_by(sender_name, user_text)}"
    entries.append(("user", f"{moment_note}\n{current}" if moment_note else current))

    for role, content in entries:
        last = messages[-1]
        if last["role"] == role:
            last["content"] = f"{last['content']}\n{content}"
        else:
            messages.append({"role": role, "content": content})
    return messages


def _said_by(sender_name: str | None, text: str) -> str:
    return f"{sender_name}: {text}" if sender_name else text
