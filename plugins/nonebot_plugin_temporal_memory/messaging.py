"""Sending text back to QQ: split when long, never as CQ code, failures logged not raised."""

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

from memory_core.conversation.engine import Delivery, SendText, split_reply


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


async def send_text(
    bot: Bot,
    event: MessageEvent,
    text: str,
    *,
    max_chars: int,
    quote: bool = False,
) -> Delivery | None:
    """Send ``text`` as one or more plain-text messages; ``None`` if none got through.

    The text always goes in a text segment, so CQ-code-looking text from a user or a model is
    shown literally, never interpreted. Stops at the first failed piece (a risk-control refusal
    would refuse the rest too); the returned delivery holds what was actually sent and the id
    of its first message.
    """
    sent: list[str] = []
    first_id: int | None = None
    for index, piece in enumerate(split_reply(text, max_chars)):
        message = Message(MessageSegment.text(piece))
        if index == 0 and quote:
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
    """The engine's ``send`` callback for one event."""

    async def send(text: str) -> Delivery | None:
        return await send_text(bot, event, text, max_chars=max_chars, quote=quote)

    return send


def _chat_of(event: MessageEvent) -> str:
    if isinstance(event, GroupMessageEvent):
        return f"group {event.group_id}"
    return f"user {event.user_id}"
