"""Which session an imported message belongs to, who said it, and its stable id.

A private chat export holds two people: the user (``ImportTarget.user_id``) and the account
the bot now runs on, whose lines become the bot's (``assistant``) turns. A group export holds
many: each member's lines go to their own group session (``"{group}:{user}"``, as the bot
stores live messages), and the bot account's lines to the session of the member who spoke
last before them (the live bot stores a reply with the message it answers).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import tzinfo

from ..models import Role, TurnInput
from .qq_text import LineProblem, QQTextExport, QQTextMessage

IMPORT_UUID_PREFIX = "import:"


@dataclass(frozen=True)
class ImportTarget:
    """Where imported messages go: a private chat (``user_id``) or a group (``group_id``).

    ``self_id`` is the bot's QQ account; ``bot_names`` the names its lines carry in the export
    (needed when the export shows no QQ numbers); ``user_names`` the private chat user's names
    (the export's ``消息对象`` is used when none is given).
    """

    user_id: int | None = None
    group_id: int | None = None
    self_id: int | None = None
    bot_names: frozenset[str] = field(default_factory=frozenset)
    user_names: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if (self.user_id is None) == (self.group_id is None):
            raise ValueError("the target is a private chat (--user-id) or a group (--group-id)")


def stable_uuid(turn: TurnInput, occurrence: int) -> str:
    """An id for a turn whose source has none, the same on every import of the same file:
    its session, role, time, sender and text, and how many identical lines came before it
    (two "哈哈" in the same second are two turns)."""
    when = turn.created_at.isoformat() if turn.created_at else ""
    key = "\x1f".join(
        (turn.session_key, turn.role, when, turn.sender_name or "", turn.content, str(occurrence))
    )
    return IMPORT_UUID_PREFIX + hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()[:40]


class StableIds:
    """Hands out :func:`stable_uuid` ids, counting repeats of the same line."""

    def __init__(self) -> None:
        self._seen: Counter[tuple[str, str, str, str, str]] = Counter()

    def assign(self, turn: TurnInput) -> TurnInput:
        if turn.message_uuid or turn.message_id is not None:
            return turn  # the source's id (memory_core.dialogue.turn_rows.message_uuid_for)
        when = turn.created_at.isoformat() if turn.created_at else ""
        key = (turn.session_key, turn.role, when, turn.sender_name or "", turn.content)
        occurrence = self._seen[key]
        self._seen[key] += 1
        return replace(turn, message_uuid=stable_uuid(turn, occurrence))


def pick_chat(export: QQTextExport, chat: str | None) -> tuple[QQTextMessage, ...]:
    """The messages of one chat of the export; ``ValueError`` when the export holds several
    and ``chat`` does not name one of them."""
    if chat is not None:
        if chat not in export.chats:
            raise ValueError(f"no chat {chat!r} in the export (it holds: {_names(export)})")
        return tuple(m for m in export.messages if m.chat == chat)
    if len(export.chats) > 1:
        raise ValueError(f"the export holds several chats ({_names(export)}); pick one with --chat")
    return export.messages


def _names(export: QQTextExport) -> str:
    return "、".join(export.chats) or "none"


@dataclass
class QQTextRouter:
    """Turns the messages of one chat into turns of ``target`` (see the module docstring)."""

    target: ImportTarget
    tz: tzinfo
    chat_name: str | None = None
    problems: list[LineProblem] = field(default_factory=list)
    system_lines: int = 0

    def turns(self, messages: tuple[QQTextMessage, ...]) -> Iterator[tuple[int, TurnInput]]:
        """``(line, turn)`` for each message that can be placed; the others become
        ``problems`` (system notices are only counted)."""
        ids = StableIds()
        known_qq = {m.sender: m.qq for m in messages if m.qq is not None}
        last_speaker: int | None = None
        for message in messages:
            if message.is_system:
                self.system_lines += 1
                continue
            placed = (
                self._private(message)
                if self.target.group_id is None
                else self._group(message, known_qq, last_speaker)
            )
            if isinstance(placed, str):
                self.problems.append(LineProblem(message.line, placed))
                continue
            user_id, role = placed
            if self.target.group_id is not None and role == "user":
                last_speaker = user_id
            turn = TurnInput(
                user_id=user_id,
                group_id=self.target.group_id,
                self_id=self.target.self_id,
                role=role,
                content=message.text,
                sender_name=message.sender or None,
                created_at=message.time.replace(tzinfo=self.tz),
            )
            yield message.line, ids.assign(turn)

    def _is_bot(self, message: QQTextMessage) -> bool:
        if message.qq is not None and self.target.self_id is not None:
            return message.qq == self.target.self_id
        return message.sender in self.target.bot_names

    def _private(self, message: QQTextMessage) -> tuple[int, Role] | str:
        assert self.target.user_id is not None
        user_names = self.target.user_names or frozenset(filter(None, [self.chat_name]))
        if message.qq is not None:
            is_user = message.qq == self.target.user_id
        elif user_names:
            is_user = message.sender in user_names
        else:
            return (
                f"cannot tell whether {message.sender!r} is the user: the export has no QQ "
                "numbers; pass --user-name (the user's name in the export)"
            )
        if is_user and self._is_bot(message):
            return f"{message.sender!r} is both the user and the bot"
        return self.target.user_id, "user" if is_user else "assistant"

    def _group(
        self, message: QQTextMessage, known_qq: dict[str, int], last_speaker: int | None
    ) -> tuple[int, Role] | str:
        if self._is_bot(message):
            if last_speaker is None:
                return "the bot's message comes before any member spoke: nobody to file it under"
            return last_speaker, "assistant"
        qq = message.qq if message.qq is not None else known_qq.get(message.sender)
        if qq is None:
            return (
                f"no QQ number for {message.sender!r} anywhere in the export: whose group session "
                "it belongs to is unknown"
            )
        return qq, "user"
