"""What the commands share: how a command answers (``reply``, ``send_private_text``), who may
act (``is_superuser``), how an answer names a chat, and the sentences several commands say."""

from nonebot.adapters.onebot.v11 import (
    ActionFailed,
    Bot,
    Message,
    MessageEvent,
    MessageSegment,
    NetworkError,
)
from nonebot.adapters.onebot.v11.exception import ApiNotAvailable
from nonebot.log import logger
from nonebot.permission import SUPERUSER

from memory_core import split_reply

from ..intake import group_names
from ..messaging import ANSWER_MESSAGES, at_most, send_answer
from ..runtime import Runtime

DB_DOWN = "记忆数据库暂时连不上，请稍后再试。"
NOT_SUPERUSER = "只有超级用户可以{action}。"


async def reply(bot: Bot, event: MessageEvent, runtime: Runtime, text: str) -> None:
    """A command's answer: at most two messages, quoting the command in a group (so the
    member who asked sees it is theirs)."""
    await send_answer(bot, event, text, max_chars=runtime.settings.chat_reply_max_chars)


async def is_superuser(bot: Bot, event: MessageEvent) -> bool:
    return bool(await SUPERUSER(bot, event))


async def chat_label(bot: Bot, group_id: int | None, runtime: Runtime) -> str:
    """How an answer names a chat: ``私聊``, ``群“周会群”`` (its name from the QQ client,
    cached), or ``群 30001`` when the name is unknown or looking it up is off."""
    if group_id is None:
        return "私聊"
    name = None
    if runtime.config.bot_resolve_group_names:
        name = await group_names.name(bot, group_id)
    return f"群“{name}”" if name else f"群 {group_id}"


def in_chat(label: str) -> str:
    """``在私聊中``, ``在群“周会群”中``, ``在群 30001 中`` (a space after a number)."""
    return f"在{label} 中" if label[-1:].isdigit() else f"在{label}中"


async def send_private_text(bot: Bot, user_id: int, text: str, *, max_chars: int) -> bool:
    """Send ``text`` to ``user_id`` in a private chat, in at most ``ANSWER_MESSAGES``
    messages (a command's answer); ``False`` if any piece failed."""
    for piece in at_most(split_reply(text, max_chars), ANSWER_MESSAGES, max_chars):
        try:
            await bot.send_private_msg(user_id=user_id, message=Message(MessageSegment.text(piece)))
        except (ActionFailed, NetworkError, ApiNotAvailable) as exc:
            logger.warning(f"sending privately to user {user_id} failed: {exc!r}")
            return False
    return True
