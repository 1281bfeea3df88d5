"""The recalled-dialogue block of a prompt: windows as time-stamped memory lines within a
token budget. Pure: nothing here talks to a model or a database."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

from ..lang.timefmt import format_memory_line
from ..lang.tokens import TokenCounter
from ..models import MemoryTurn, RecallWindow

MEMORY_HEADER = "--- 相关记忆 ---"
# Under the header when recall drew on a shared group's other members (recall.sharing).
OTHERS_NOTE = (
    "（本群开启了共享记忆：标为“群友”的行是其他群成员对你说的话，“你对群友…”是你给他们的回复；"
    "这些不是当前这位成员说的，提到时说明是谁说的。）"
)


@dataclass(frozen=True)
class MemoryBlock:
    """The recalled-memory text for the prompt and what went into it.

    ``turn_ids`` are the kept turns in time order (a numbered block's line ``#n`` is
    ``turn_ids[n - 1]``); ``tokens`` is the count of ``text``; ``dropped_windows`` counts
    windows of which not even the anchor fitted the budget.
    """

    text: str
    turn_ids: tuple[int, ...]
    tokens: int
    dropped_windows: int


def time_key(turn: MemoryTurn) -> tuple[datetime, int]:
    return (turn.created_at.astimezone(timezone.utc), turn.id)


def _nearest_first(window: RecallWindow) -> list[MemoryTurn]:
    """The window's turns ordered by distance from the anchor, the anchor first.

    On equal distance the later turn comes first, so shrinking drops the earlier neighbour
    before the later one: the turn after an anchor is usually the answer to it.
    """
    turns = sorted(window.turns, key=time_key)
    positions = [i for i, turn in enumerate(turns) if turn.id == window.anchor_id]
    # A window without its anchor should not happen; shrink around its middle rather than fail.
    center = positions[0] if positions else len(turns) // 2
    order = sorted(range(len(turns)), key=lambda i: (abs(i - center), i < center))
    return [turns[i] for i in order]


@dataclass(frozen=True)
class LineBudget:
    """How memory lines are written and fitted: dated from ``now`` in ``tz``, counted by
    ``counter`` within ``max_tokens``; ``exclude_ids`` are turns already in the prompt,
    ``asker`` the person being answered (see ``build_memory_block``); ``numbered``: each line
    starts with its number (``#1``, ``#2`` … in time order), which the chat model cites
    (``conversation.citation``)."""

    now: datetime
    tz: ZoneInfo
    counter: TokenCounter
    max_tokens: int
    exclude_ids: Collection[int] = ()
    asker: int | None = None
    numbered: bool = False

    def within(self, max_tokens: int) -> LineBudget:
        """The same budget for at most ``max_tokens`` (never below zero)."""
        return dataclasses.replace(self, max_tokens=max(max_tokens, 0))


def build_memory_block(windows: Sequence[RecallWindow], budget: LineBudget) -> MemoryBlock:
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
    now, tz, counter, max_tokens, asker = (
        budget.now, budget.tz, budget.counter, budget.max_tokens, budget.asker
    )  # fmt: skip
    excluded = set(budget.exclude_ids) | repeated_turns(windows)
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
        body = [lines[turn.id] for turn in sorted(turns, key=time_key)]
        if budget.numbered:
            body = [number_line(n, line) for n, line in enumerate(body, start=1)]
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
    ordered_kept = sorted(kept.values(), key=time_key)
    return MemoryBlock(
        text=render(ordered_kept),
        turn_ids=tuple(t.id for t in ordered_kept),
        tokens=tokens,
        dropped_windows=dropped,
    )


def number_line(number: int, line: str) -> str:
    """``#3 [2024-01-16 10:30:15] (5小时前) user: …``: a memory line the model can cite by its
    number. Continuation lines stay indented, so a line starting with ``#`` at column 0 is
    always a real memory line."""
    return f"#{number} {line}"


# Two lines say the same when the shorter, stripped of punctuation and spaces, is inside the
# longer and at least this share of it: "好的，记住啦：我的工位密码是 8812" restates "我的工位
# 密码是8812" (11 of 16 characters), "好的" inside "好的，明天见" does not (2 of 6).
SAME_SHARE = 0.5
SAME_MIN_CHARS = 4
_NOT_WORD = re.compile(r"[\W_]+")


def same_words(first: str, second: str) -> bool:
    """Whether two lines say the same thing (one restates the other, see ``SAME_SHARE``)."""
    a, b = _NOT_WORD.sub("", first.lower()), _NOT_WORD.sub("", second.lower())
    short, long = sorted((a, b), key=len)
    return len(short) >= SAME_MIN_CHARS and short in long and len(short) >= SAME_SHARE * len(long)


def repeated_turns(windows: Sequence[RecallWindow]) -> set[int]:
    """The recalled turns that only repeat another recalled turn, to be shown once: the bot's
    restatement of what a person said (its echo "好的，记住啦：…") goes, the person's words stay;
    of two lines of the same role saying the same, the one of the better window stays."""
    turns = list({t.id: t for w in windows for t in w.turns}.values())
    said = [t for t in turns if t.role == "user"]
    gone: set[int] = set()
    for i, turn in enumerate(turns):
        if turn.role != "user" and any(same_words(turn.content, t.content) for t in said):
            gone.add(turn.id)
            continue
        earlier = (t for t in turns[:i] if t.role == turn.role and t.id not in gone)
        if any(same_words(turn.content, t.content) for t in earlier):
            gone.add(turn.id)
    return gone


def _member_names(windows: Sequence[RecallWindow]) -> dict[int, str]:
    """Each member's latest name among the recalled user turns."""
    names: dict[int, str] = {}
    turns = sorted((t for w in windows for t in w.turns if t.role == "user"), key=time_key)
    for turn in turns:
        if turn.sender_name and turn.sender_name.strip():
            names[turn.user_id] = turn.sender_name
    return names


def _member_label(turn: MemoryTurn, names: dict[int, str]) -> str:
    """``群友(小明)`` for another member's words, ``你对群友小明`` for the bot's reply to them."""
    name = names.get(turn.user_id) or f"QQ {turn.user_id}"
    return f"群友({name})" if turn.role == "user" else f"你对群友{name}"
