"""Prompt assembly: the recalled-memory block, the time-aware system prompt, chat messages.

Nothing here talks to a model or a database; every function is pure given its inputs, so the
exact text the model sees can be tested.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from ..lang.timefmt import format_absolute, format_memory_line, relative_time_zh, weekday_zh
from ..lang.tokens import TokenCounter
from ..models import MemoryTurn, RecallWindow

MEMORY_HEADER = "--- 相关记忆 ---"
# Under the header when recall drew on a shared group's other members (recall.sharing).
OTHERS_NOTE = (
    "（本群开启了共享记忆：标为“群友”的行是其他群成员对你说的话，“你对群友…”是你给他们的回复；"
    "这些不是当前这位成员说的，提到时说明是谁说的。）"
)
RECAP_AFTER = timedelta(hours=1)


@dataclass(frozen=True)
class MemoryBlock:
    """The recalled-memory text for the prompt and what went into it.

    ``turn_ids`` are the kept turns in time order; ``tokens`` is the count of ``text``;
    ``dropped_windows`` counts windows of which not even the anchor fitted the budget.
    """

    text: str
    turn_ids: tuple[int, ...]
    tokens: int
    dropped_windows: int


def _elapsed(then: datetime, now: datetime) -> timedelta:
    if then.tzinfo is None or now.tzinfo is None:
        raise ValueError("datetimes must be timezone-aware")
    return now.astimezone(timezone.utc) - then.astimezone(timezone.utc)


def _time_key(turn: MemoryTurn) -> tuple[datetime, int]:
    return (turn.created_at.astimezone(timezone.utc), turn.id)


def _nearest_first(window: RecallWindow) -> list[MemoryTurn]:
    """The window's turns ordered by distance from the anchor, the anchor first.

    On equal distance the later turn comes first, so shrinking drops the earlier neighbour
    before the later one: the turn after an anchor is usually the answer to it.
    """
    turns = sorted(window.turns, key=_time_key)
    positions = [i for i, turn in enumerate(turns) if turn.id == window.anchor_id]
    # A window without its anchor should not happen; shrink around its middle rather than fail.
    center = positions[0] if positions else len(turns) // 2
    order = sorted(range(len(turns)), key=lambda i: (abs(i - center), i < center))
    return [turns[i] for i in order]


def build_memory_block(
    windows: Sequence[RecallWindow],
    now: datetime,
    tz: ZoneInfo,
    counter: TokenCounter,
    max_tokens: int,
    *,
    exclude_ids: Collection[int] = (),
    asker: int | None = None,
) -> MemoryBlock:
    """Recalled windows as ``--- 相关记忆 ---`` plus one memory line per turn, in time order.

    Windows arrive best first and are taken greedily. A window that does not fit loses its
    farthest neighbours first; it is dropped only if even its anchor does not fit. Turns are
    never cut. Turns in ``exclude_ids`` (already in the prompt as recent turns) and turns shared
    with an earlier window are skipped. The token count of the whole text, header included, never
    exceeds ``max_tokens``; nothing kept (or ``max_tokens == 0``) gives an empty text.

    ``asker``: the person being answered. In a shared group, turns of other members' sessions
    are labelled ``群友(name)`` and ``你对群友name`` (the bot's replies to them), and
    ``OTHERS_NOTE`` under the header says what that means.
    """
    excluded = set(exclude_ids)
    if max_tokens <= 0 or not windows:
        return MemoryBlock(text="", turn_ids=(), tokens=0, dropped_windows=len(windows))
    names = _member_names(windows)

    lines: dict[int, str] = {}
    line_tokens: dict[int, int] = {}
    kept: dict[int, MemoryTurn] = {}
    tokens = counter.count(MEMORY_HEADER)  # the count of the text built so far
    dropped = 0

    def others(turn: MemoryTurn) -> bool:
        return asker is not None and turn.user_id != asker

    def render(turns: Sequence[MemoryTurn]) -> str:
        body = [lines[turn.id] for turn in sorted(turns, key=_time_key)]
        note = [OTHERS_NOTE] if any(others(turn) for turn in turns) else []
        return "\n".join([MEMORY_HEADER, *note, *body])

    for window in windows:
        ordered = [t for t in _nearest_first(window) if t.id not in excluded]
        if not any(t.id not in kept for t in ordered):
            continue  # everything already shown or excluded: nothing to spend tokens on
        for turn in ordered:
            if turn.id not in lines:
                label = _member_label(turn, names) if others(turn) else None
                lines[turn.id] = format_memory_line(turn, now, tz, label=label)
                line_tokens[turn.id] = counter.count(lines[turn.id])

        fitted = False
        previous_new: frozenset[int] = frozenset()
        # Try the whole window, then one neighbour fewer at a time, down to the anchor alone.
        for size in range(len(ordered), 0, -1):
            new = [t for t in ordered[:size] if t.id not in kept]
            new_ids = frozenset(t.id for t in new)
            if not new or new_ids == previous_new:
                continue  # same candidate as the larger size already tried (or nothing new)
            previous_new = new_ids
            # Pre-tokenization splits at every line start, so joining lines saves at most about
            # a token per line: this is a cheap floor that skips exact counts of candidates
            # that cannot fit. The exact count below is what guarantees the budget.
            if tokens + sum(line_tokens[t.id] - 1 for t in new) > max_tokens:
                continue
            text = render([*kept.values(), *new])
            count = counter.count(text)
            if count <= max_tokens:
                kept.update((t.id, t) for t in new)
                tokens = count
                fitted = True
                break
        if not fitted:
            dropped += 1

    if not kept:
        return MemoryBlock(text="", turn_ids=(), tokens=0, dropped_windows=dropped)
    ordered_kept = sorted(kept.values(), key=_time_key)
    return MemoryBlock(
        text=render(ordered_kept),
        turn_ids=tuple(t.id for t in ordered_kept),
        tokens=tokens,
        dropped_windows=dropped,
    )


def _member_names(windows: Sequence[RecallWindow]) -> dict[int, str]:
    """Each member's latest name among the recalled user turns."""
    names: dict[int, str] = {}
    turns = sorted((t for w in windows for t in w.turns if t.role == "user"), key=_time_key)
    for turn in turns:
        if turn.sender_name and turn.sender_name.strip():
            names[turn.user_id] = turn.sender_name
    return names


def _member_label(turn: MemoryTurn, names: dict[int, str]) -> str:
    """``群友(小明)`` for another member's words, ``你对群友小明`` for the bot's reply to them."""
    name = names.get(turn.user_id) or f"QQ {turn.user_id}"
    return f"群友({name})" if turn.role == "user" else f"你对群友{name}"


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
    for turn in sorted(recent, key=_time_key):
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
