"""OneBot v11 message events -> core ``TurnInput``; which events are ours at all.

The adapter has already parsed CQ-code strings (go-cqhttp) into segments, stripped an @ of
the bot or its nickname at the start, and looked up a quoted message (``event.reply``).
"""

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Hashable
from datetime import datetime, timedelta, timezone
from typing import Any

from nonebot.adapters.onebot.v11 import (
    ActionFailed,
    Bot,
    Event,
    GroupMessageEvent,
    Message,
    MessageEvent,
    NetworkError,
)
from nonebot.adapters.onebot.v11.event import Reply
from nonebot.adapters.onebot.v11.exception import ApiNotAvailable
from nonebot.exception import IgnoredException
from nonebot.log import logger
from nonebot.message import event_preprocessor

from memory_core import TurnInput

from .runtime import Runtime, get_runtime
from .segments import at_targets, flatten_segments, quote_reply, with_quote

# A platform timestamp further off than this from our clock is not trusted as the turn's time.
_EVENT_TIME_PAST = timedelta(days=1)
_EVENT_TIME_FUTURE = timedelta(minutes=5)
_NAME_TTL = 3600.0
_NAME_LOOKUP_TIMEOUT = 3.0
_NAME_CACHE_MAX = 4096
# One message may @ thousands of members: only the first few unknown ones are looked up (the
# rest keep their number), a few at a time.
_NAME_LOOKUPS_PER_MESSAGE = 10
_NAME_LOOKUPS_AT_ONCE = 4


class RecentMessages:
    """The last ``capacity`` message keys seen, to drop an event delivered twice."""

    def __init__(self, capacity: int = 8192) -> None:
        self._capacity = capacity
        self._keys: OrderedDict[tuple[Any, ...], None] = OrderedDict()

    def seen(self, key: tuple[Any, ...]) -> bool:
        """True if ``key`` was seen before; remembers it either way."""
        if key in self._keys:
            self._keys.move_to_end(key)
            return True
        self._keys[key] = None
        if len(self._keys) > self._capacity:
            self._keys.popitem(last=False)
        return False

    def clear(self) -> None:
        self._keys.clear()


recent_messages = RecentMessages()


def message_key(event: MessageEvent) -> tuple[Any, ...]:
    """What tells a message delivered twice: NapCat's and go-cqhttp's ids are 32-bit hashes that
    two members' messages in a group may share, so the sender is part of it."""
    chat = event.group_id if isinstance(event, GroupMessageEvent) else event.user_id
    return (event.self_id, event.message_type, chat, event.user_id, event.message_id)


class OddGroupEvents:
    """Says once, in one line, that "group" messages the adapter could not read as such are
    dropped (a sender may send many: the log is not theirs to fill)."""

    def __init__(self) -> None:
        self.said = False

    def drop(self, event: MessageEvent) -> None:
        group = repr(getattr(event, "group_id", None))[:40]
        line = f"group message {event.message_id} dropped: its group_id {group} is no integer"
        if self.said:
            logger.debug(line)
        else:
            self.said = True
            logger.warning(f"{line} (said once; later ones are logged at DEBUG)")
        raise IgnoredException("a group message without a group")


odd_group_events = OddGroupEvents()


@event_preprocessor
async def drop_own_and_repeated_messages(event: Event) -> None:
    """The bot's own messages are never input; a message delivered twice is handled once; a
    "group" message without a readable group is no message of any chat.

    NapCat with ``reportSelfMessage`` sends the bot's messages as ``message_sent`` events, which
    the adapter does not turn into message events; some implementations send them as ordinary
    messages from ``self_id``, caught here. A group message whose ``group_id`` is no integer
    reaches us as a plain ``MessageEvent`` (the adapter's fallback), which would be answered
    and stored as the sender's private chat, past ``BOT_GROUP_ALLOWLIST``.
    """
    if not isinstance(event, MessageEvent):
        return
    if event.message_type == "group" and not isinstance(event, GroupMessageEvent):
        odd_group_events.drop(event)
    if event.user_id == event.self_id:
        raise IgnoredException("the bot's own message")
    if recent_messages.seen(message_key(event)):
        logger.debug(f"duplicate message {event.message_id} ignored")
        raise IgnoredException("duplicate message event")


def group_id_of(event: MessageEvent) -> int | None:
    """The group of a group message; ``None`` for private (including temporary) chats."""
    return event.group_id if isinstance(event, GroupMessageEvent) else None


def accepts(event: MessageEvent, runtime: Runtime) -> bool:
    """A real user's message from a chat we serve (anonymous group messages are skipped:
    their user id is a throwaway)."""
    if event.user_id == event.self_id:
        return False
    if isinstance(event, GroupMessageEvent):
        if event.sub_type == "anonymous" or event.anonymous is not None:
            return False
        return runtime.config.group_allowed(event.group_id)
    return True


def sender_name(event: MessageEvent) -> str | None:
    """Group card first, then nickname."""
    card = (event.sender.card or "").strip()
    nickname = (event.sender.nickname or "").strip()
    return card or nickname or None


def segments_of(message: Message) -> list[dict[str, Any]]:
    """Plain, JSON-safe dict segments of a message."""
    raw = [{"type": seg.type, "data": dict(seg.data)} for seg in message]
    loaded: list[dict[str, Any]] = json.loads(json.dumps(raw, ensure_ascii=False, default=str))
    return loaded


def event_time(event: MessageEvent, now: datetime | None = None) -> datetime | None:
    """When the user sent it, by the platform's clock, if that clock looks sane."""
    now = now or datetime.now(timezone.utc)
    try:
        sent = datetime.fromtimestamp(event.time, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    if now - _EVENT_TIME_PAST <= sent <= now + _EVENT_TIME_FUTURE:
        return sent
    return None


class NameCache:
    """Names looked up from the QQ client, each kept for an hour, the oldest dropped first."""

    def __init__(self) -> None:
        self._names: OrderedDict[Hashable, tuple[float, str]] = OrderedDict()

    def get(self, key: Hashable) -> str | None:
        cached = self._names.get(key)
        if cached is None or time.monotonic() - cached[0] >= _NAME_TTL:
            return None
        return cached[1]

    def put(self, key: Hashable, name: str) -> None:
        self._names[key] = (time.monotonic(), name)
        self._names.move_to_end(key)
        if len(self._names) > _NAME_CACHE_MAX:
            self._names.popitem(last=False)


class MemberNames:
    """Group card / nickname of @-mentioned members, looked up once an hour at most (a member
    the client cannot name is not asked about again within the hour either); per message, at
    most ``_NAME_LOOKUPS_PER_MESSAGE`` members, ``_NAME_LOOKUPS_AT_ONCE`` at a time."""

    def __init__(self) -> None:
        self._cache = NameCache()

    async def resolve(self, bot: Bot, group_id: int, qqs: list[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        missing: list[str] = []
        for qq in dict.fromkeys(qqs):
            cached = self._cache.get((group_id, qq))
            if cached:
                found[qq] = cached
            elif cached is None and qq.isdigit() and len(missing) < _NAME_LOOKUPS_PER_MESSAGE:
                missing.append(qq)
        if missing:
            slots = asyncio.Semaphore(_NAME_LOOKUPS_AT_ONCE)
            looked_up = await asyncio.gather(
                *(self._lookup(bot, group_id, qq, slots) for qq in missing)
            )
            for qq, name in zip(missing, looked_up, strict=False):
                self._cache.put((group_id, qq), name)
                if name:
                    found[qq] = name
        return found

    @staticmethod
    async def _lookup(bot: Bot, group_id: int, qq: str, slots: asyncio.Semaphore) -> str:
        try:
            async with slots:
                info = await asyncio.wait_for(
                    bot.get_group_member_info(group_id=group_id, user_id=int(qq)),
                    _NAME_LOOKUP_TIMEOUT,
                )
        except (ActionFailed, NetworkError, ApiNotAvailable, asyncio.TimeoutError) as exc:
            logger.debug(f"member name of {qq} in group {group_id} unavailable: {exc!r}")
            return ""
        if not isinstance(info, dict):
            return ""
        return str(info.get("card") or info.get("nickname") or "").strip()


class GroupNames:
    """A group's name for the prompt, looked up once an hour at most (a client that cannot
    answer is not asked again within the hour either)."""

    def __init__(self) -> None:
        self._cache = NameCache()

    async def name(self, bot: Bot, group_id: int) -> str | None:
        cached = self._cache.get(group_id)
        if cached is None:
            cached = await self._lookup(bot, group_id)
            self._cache.put(group_id, cached)
        return cached or None

    @staticmethod
    async def _lookup(bot: Bot, group_id: int) -> str:
        try:
            info = await asyncio.wait_for(
                bot.get_group_info(group_id=group_id), _NAME_LOOKUP_TIMEOUT
            )
        except (ActionFailed, NetworkError, ApiNotAvailable, asyncio.TimeoutError) as exc:
            logger.debug(f"name of group {group_id} unavailable: {exc!r}")
            return ""
        if not isinstance(info, dict):
            return ""
        return str(info.get("group_name") or "").strip()


member_names = MemberNames()
group_names = GroupNames()


async def message_text(bot: Bot, event: MessageEvent, runtime: Runtime) -> str:
    """The message as text: segments flattened, a quoted message as a ``[回复 …]`` prefix."""
    segments = segments_of(event.message)
    names: dict[str, str] = {}
    group_id = group_id_of(event)
    if group_id is not None and runtime.config.bot_resolve_at_names:
        wanted = [qq for qq in at_targets(segments) if qq != str(event.self_id)]
        wanted = [qq for qq in wanted if not _segment_has_name(segments, qq)]
        if wanted:
            names = await member_names.resolve(bot, group_id, wanted)
    body = flatten_segments(
        segments, self_id=event.self_id, self_name=runtime.bot_name, names=names
    )
    quote = None
    if event.reply is not None and quoted_from_this_chat(event, event.reply):
        reply = event.reply
        if reply.sender.user_id is not None and reply.sender.user_id == event.self_id:
            who: str | None = runtime.bot_name
        else:
            who = (reply.sender.card or "").strip() or (reply.sender.nickname or "").strip()
        # The quoted message's own quote (the bot quotes what it answers) is left out: one
        # level is what the reader needs, "[回复 小诗: [回复]…]" is noise.
        quoted_segments = [seg for seg in segments_of(reply.message) if seg.get("type") != "reply"]
        quoted = flatten_segments(
            quoted_segments, self_id=event.self_id, self_name=runtime.bot_name
        )
        quote = quote_reply(who or None, quoted)
    return with_quote(quote, body)


def quoted_from_this_chat(event: MessageEvent, reply: Reply) -> bool:
    """Whether the quoted message was said in the chat of ``event``: a message id from another
    group or another person's chat (QQ clients resolve any id they know) must not carry its
    text into this chat's memory. A group quote must name this group (NapCat, go-cqhttp and
    Lagrange return ``group_id`` from ``get_msg``); a private one must be by this person or by
    the bot."""
    group_id = group_id_of(event)
    if group_id is not None:
        quoted_group = getattr(reply, "group_id", None)
        return reply.message_type == "group" and str(quoted_group) == str(group_id)
    return reply.message_type == "private" and str(reply.sender.user_id) in {
        str(event.user_id),
        str(event.self_id),
    }


def _segment_has_name(segments: list[dict[str, Any]], qq: str) -> bool:
    return any(
        seg.get("type") == "at"
        and str(seg.get("data", {}).get("qq")) == qq
        and str(seg.get("data", {}).get("name") or "").strip()
        for seg in segments
    )


async def turn_from_event(bot: Bot, event: MessageEvent, runtime: Runtime) -> TurnInput:
    """The user turn for a message event (content may be blank: the core then refuses it)."""
    return TurnInput(
        user_id=event.user_id,
        group_id=group_id_of(event),
        self_id=int(bot.self_id),
        role="user",
        content=await message_text(bot, event, runtime),
        sender_name=sender_name(event),
        message_id=event.message_id,
        created_at=event_time(event),
        raw_segments=segments_of(event.original_message),
    )


async def addressed_rule(event: MessageEvent) -> bool:
    """Rule: a message to the bot (private, or @ / reply / nickname in a group) from a real
    user in a chat we serve."""
    return event.is_tome() and accepts(event, get_runtime())


async def unaddressed_group_rule(event: MessageEvent) -> bool:
    """Rule: a group message not addressed to the bot, in a group we serve, and recording
    those is switched on."""
    if not isinstance(event, GroupMessageEvent) or event.is_tome():
        return False
    runtime = get_runtime()
    return runtime.config.bot_record_unaddressed and accepts(event, runtime)
