"""Sending text back to QQ: split when long, never as CQ code, failures logged not raised.

A command's answer (``send_answer``) is at most ``ANSWER_MESSAGES`` messages and quotes the
command in a group; ``quoted`` is how an answer repeats what someone typed. A chat reply that
rests on a remembered message quotes that message instead (``sender_for``, ``Citation``).
"""

from typing import Any

from nonebot.adapters.onebot.v11 import (
    ActionFailed,
    Bot,
    GroupMessageEvent,
    Message,
    MessageEvent,
    MessageSegment,
    NetworkError,
)
from nonebot.adapters.onebot.v11.exception import ApiNotAvailable
from nonebot.log import logger

from memory_core import Citation, Delivery, SendText, split_reply


def _message_id(result: Any) -> int | None:
    if isinstance(result, dict):
        value = result.get("message_id")
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                return None
    return None


ANSWER_MESSAGES = 2
"""A command answers in at most this many messages: a long answer in a group floods it, and
many messages in a row are what QQ's risk control bans accounts for."""
ANSWER_CUT_MARK = "……（太长，后面的省略了）"
QUOTE_CHARS = 30


def quoted(text: str, limit: int = QUOTE_CHARS) -> str:
    """``text`` in Chinese quotes, on one line, cut to ``limit`` characters with ``…``: how
    an answer repeats an argument ("没有找到“…”") without echoing a long one back."""
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[:limit] + "…"
    return f"“{text}”"


def at_most(pieces: list[str], count: int, max_chars: int) -> list[str]:
    """The first ``count`` pieces, the last one ending in ``ANSWER_CUT_MARK`` (within
    ``max_chars``) when some were left out."""
    if len(pieces) <= count:
        return pieces
    kept = pieces[:count]
    room = max(max_chars - len(ANSWER_CUT_MARK), 0)
    kept[-1] = kept[-1][:room].rstrip() + ANSWER_CUT_MARK
    return kept


async def send_answer(
    bot: Bot, event: MessageEvent, text: str, *, max_chars: int
) -> Delivery | None:
    """A command's answer: at most ``ANSWER_MESSAGES`` messages, the first quoting the
    command in a group (so the member who asked sees the answer is theirs)."""
    return await send_text(
        bot,
        event,
        text,
        max_chars=max_chars,
        quote=isinstance(event, GroupMessageEvent),
        max_messages=ANSWER_MESSAGES,
    )


async def send_text(
    bot: Bot,
    event: MessageEvent,
    text: str,
    *,
    max_chars: int,
    quote: bool = False,
    max_messages: int | None = None,
    quote_id: int | None = None,
) -> Delivery | None:
    """Send ``text`` as one or more plain-text messages; ``None`` if none got through.

    The text always goes in a text segment, so CQ-code-looking text from a user or a model is
    shown literally, never interpreted. Stops at the first failed piece (a risk-control refusal
    would refuse the rest too); the returned delivery holds what was actually sent and the id
    of its first message. With ``max_messages``, a text that needs more is cut (``at_most``).
    ``quote`` quotes the event's message on the first piece; ``quote_id`` quotes that message
    instead (one quote at most: QQ shows one).
    """
    sent: list[str] = []
    first_id: int | None = None
    pieces = split_reply(text, max_chars)
    if max_messages is not None:
        pieces = at_most(pieces, max_messages, max_chars)
    for index, piece in enumerate(pieces):
        message = Message(MessageSegment.text(piece))
        if index == 0 and quote_id is not None:
            message = MessageSegment.reply(quote_id) + message
        elif index == 0 and quote:
            message = MessageSegment.reply(event.message_id) + message
        try:
            result = await bot.send(event, message)
        except (ActionFailed, NetworkError, ApiNotAvailable) as exc:
            logger.warning(f"sending reply piece {index + 1} to {_chat_of(event)} failed: {exc!r}")
            break
        sent.append(piece)
        if first_id is None:
            first_id = _message_id(result)
    if not sent:
        return None
    return Delivery(text="\n".join(sent), message_id=first_id)


def sender_for(bot: Bot, event: MessageEvent, *, max_chars: int, quote: bool) -> SendText:
    """The engine's ``send`` callback for one event: a reply citing a remembered message
    (``cited``, checked by the core: of this chat, still stored) quotes it, in place of the
    event's quote."""

    async def send(text: str, *, cited: Citation | None = None) -> Delivery | None:
        quote_id = cited.message_id if cited is not None else None
        return await send_text(
            bot, event, text, max_chars=max_chars, quote=quote, quote_id=quote_id
        )

    return send


def _chat_of(event: MessageEvent) -> str:
    if isinstance(event, GroupMessageEvent):
        return f"group {event.group_id}"
    return f"user {event.user_id}"
