"""/remember (记住): a note the bot keeps for good, stored as the person's turn."""

from nonebot.adapters.onebot.v11 import Bot, Message, MessageEvent

from memory_core import TurnInput

from ..intake import group_id_of, segments_of, sender_name
from ..runtime import Runtime
from ..segments import flatten_segments
from .common import reply
from .dispatch import plugin_command

REMEMBER_USAGE = "用法：/remember <内容>（记住）让我永久记住一条笔记。"


@plugin_command("remember", "记住")
async def handle_remember(bot: Bot, event: MessageEvent, args: Message, runtime: Runtime) -> None:
    note = flatten_segments(segments_of(args), self_id=event.self_id, self_name=runtime.bot_name)
    if not note:
        await reply(bot, event, runtime, REMEMBER_USAGE)
        return
    outcome = await runtime.engine.record(
        TurnInput(
            user_id=event.user_id,
            group_id=group_id_of(event),
            self_id=int(bot.self_id),
            role="user",
            content=note,
            sender_name=sender_name(event),
            message_id=event.message_id,
            raw_segments=segments_of(args),
        )
    )
    if outcome is None or (outcome.turn is None and not outcome.spooled):
        await reply(bot, event, runtime, "没能记下这条笔记，请稍后再试。")
    elif outcome.spooled:
        await reply(bot, event, runtime, "记住了（数据库暂时连不上，笔记已暂存，恢复后自动写入）。")
    else:
        await reply(bot, event, runtime, "记住了，这条会一直保留。")
