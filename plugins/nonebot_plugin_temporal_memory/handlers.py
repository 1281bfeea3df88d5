"""Conversation matchers: chat when addressed, record when not, forget recalled messages.

Priorities: confirmations (1) and commands (5) run first and block (a confirmation only when
the message answered the question), so this catch-all chat matcher (90) never sees them; the
passive recorder (91) sees only what chat did not take.
Each matcher has one rule checker: NoneBot runs every checker of a rule as a task of its own,
on every message.
"""

from nonebot import on_message, on_notice
from nonebot.adapters.onebot.v11 import (
    Bot,
    FriendRecallNoticeEvent,
    GroupMessageEvent,
    GroupRecallNoticeEvent,
    MessageEvent,
)
from nonebot.log import logger
from nonebot.rule import Rule

from memory_core import MemoryCoreError, Outcome, RecalledMessage, clocked, stage

from .bot_accounts import serving_bot
from .intake import addressed_rule, group_names, turn_from_event, unaddressed_group_rule
from .messaging import sender_for
from .pictures import OwnPictures, after_stored, start_reading
from .runtime import Runtime, RuntimeDep

CHAT_PRIORITY = 90
RECORD_PRIORITY = 91

chat = on_message(rule=Rule(addressed_rule), priority=CHAT_PRIORITY, block=True)
record = on_message(rule=Rule(unaddressed_group_rule), priority=RECORD_PRIORITY, block=False)
recall_notice = on_notice(priority=CHAT_PRIORITY, block=False)


@chat.handle()
async def handle_chat(bot: Bot, event: MessageEvent, runtime: RuntimeDep) -> None:
    with clocked(runtime.settings.memory_stage_times):
        await _chat(bot, event, runtime)


async def _chat(bot: Bot, event: MessageEvent, runtime: Runtime) -> None:
    with stage("intake"):
        async with serving_bot(bot, runtime):
            turn = await turn_from_event(bot, event, runtime)  # the turn keeps its bot's memory
    # The engine answers in the turn's account's memory (TurnInput.account).
    pictures = OwnPictures(bot, event, runtime, runtime.settings.memory_image_reply_wait)
    send = sender_for(
        bot,
        event,
        max_chars=runtime.settings.chat_reply_max_chars,
        quote=isinstance(event, GroupMessageEvent) and runtime.config.bot_group_reply_quote,
    )
    group_name = None
    if isinstance(event, GroupMessageEvent) and runtime.config.bot_resolve_group_names:
        group_name = await group_names.name(bot, event.group_id)
    result = await runtime.engine.converse(turn, send, group_name=group_name, ready=pictures)
    pictures.stored(None if result.outcome is Outcome.DUPLICATE else result.user_turn)
    logger.debug(f"message {event.message_id} in session {turn.session_key}: {result.outcome}")


@record.handle()
async def handle_unaddressed(bot: Bot, event: GroupMessageEvent, runtime: RuntimeDep) -> None:
    async with serving_bot(bot, runtime):
        turn = await turn_from_event(bot, event, runtime)
        pictures = await start_reading(bot, event, turn, runtime)
    stored = await runtime.engine.record(turn)
    after_stored(runtime, pictures, stored.turn if stored and not stored.duplicate else None)


@recall_notice.handle()
async def handle_recall(
    bot: Bot,
    event: GroupRecallNoticeEvent | FriendRecallNoticeEvent,
    runtime: RuntimeDep,
) -> None:
    # Only in the chat the notice names: message ids are not unique across chats.
    group_id = event.group_id if isinstance(event, GroupRecallNoticeEvent) else None
    recalled = RecalledMessage(
        self_id=int(bot.self_id),
        message_id=event.message_id,
        group_id=group_id,
        user_id=event.user_id,
    )
    try:
        # After the exchange of that session being answered now: its reply is stored once sent,
        # and a 撤回 that came between the two left that reply behind (found by bench.faults).
        # Meanwhile that reply must not quote the recalled message (conversation.citation).
        with runtime.engine.citations.retracting(recalled):
            logger.info(f"message {event.message_id} is being recalled: no reply quotes it")
            async with serving_bot(bot, runtime), runtime.engine.session(event.user_id, group_id):
                forgotten = await runtime.memory.parts.forgetting.delete_message(recalled)
    except MemoryCoreError as exc:
        logger.warning(f"recalled message {event.message_id} could not be forgotten: {exc}")
        return
    if forgotten is None:
        logger.info(f"recalled message {event.message_id}: forgotten once the database is back")
    else:
        logger.info(f"recalled message {event.message_id}: forgotten ({forgotten})")
