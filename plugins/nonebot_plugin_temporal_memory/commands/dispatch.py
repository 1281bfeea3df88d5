"""One matcher for all of the plugin's commands: /forget, /recall, /我的记忆, /群共享 ….

NoneBot checks every matcher against every event: its permission and its rules, each solved
through dependency injection in anyio task groups. With a matcher per command (about sixteen
checks per message) that was most of the event loop's time on an ordinary chat message. Here
the commands are still registered in NoneBot's command trie — so ``COMMAND_START``, the
longest-command rule ("/忘记我的猫" is /忘记我), an @ of the bot or its nickname before the
command, and the argument after it behave exactly as with ``on_command`` — and one rule reads
the trie's answer, which NoneBot computes once per event anyway. An ordinary message costs that
one check.

Commands run at ``COMMAND_PRIORITY`` and block: the chat matcher (``handlers``) never sees them.
What follows a command is at most ``COMMAND_ARG_MAX_CHARS`` characters: a longer one gets one
short answer and reaches no handler, so none can echo it back or search, store or delete by it.
"""

from collections.abc import Awaitable, Callable

from nonebot import on_message
from nonebot.adapters.onebot.v11 import Bot, Message, MessageEvent
from nonebot.consts import CMD_ARG_KEY, CMD_KEY, PREFIX_KEY
from nonebot.rule import Rule, command
from nonebot.typing import T_State

from ..bot_accounts import serving_bot
from ..intake import accepts
from ..messaging import send_answer
from ..runtime import Runtime, RuntimeDep, get_runtime

COMMAND_PRIORITY = 5
COMMAND_ARG_MAX_CHARS = 500
"""The longest argument a command takes (a /remember note, a /recall query, /忘记 words)."""
ARG_TOO_LONG = "内容太长（{length} 字），请控制在 {limit} 字以内。"

CommandHandler = Callable[[Bot, MessageEvent, Message, Runtime], Awaitable[None]]
"""A command's handler: the bot, the event, what follows the command, the runtime."""

_handlers: dict[tuple[str, ...], CommandHandler] = {}


def plugin_command(name: str, *aliases: str) -> Callable[[CommandHandler], CommandHandler]:
    """Register the decorated handler for ``/name`` and its aliases (with every configured
    command start)."""

    def register(handler: CommandHandler) -> CommandHandler:
        for word in (name, *aliases):
            if (word,) in _handlers:
                raise ValueError(f"command {word!r} is registered twice")
            _handlers[(word,)] = handler
        # Only for its side effect: the words enter NoneBot's command trie, which then fills
        # ``state[PREFIX_KEY]`` for every message that starts with one of them.
        command(name, *aliases)
        return handler

    return register


def handler_for(state: T_State) -> CommandHandler | None:
    """The handler of the command this message starts with, if it is one of ours."""
    prefix = state.get(PREFIX_KEY)
    return None if prefix is None else _handlers.get(prefix[CMD_KEY])


async def is_plugin_command(event: MessageEvent, state: T_State) -> bool:
    """Rule: one of our commands, from a real user in a chat we serve (one checker: each
    checker of a rule is a task of its own)."""
    return handler_for(state) is not None and accepts(event, get_runtime())


command_matcher = on_message(rule=Rule(is_plugin_command), priority=COMMAND_PRIORITY, block=True)


@command_matcher.handle()
async def dispatch(bot: Bot, event: MessageEvent, state: T_State, runtime: RuntimeDep) -> None:
    handler = handler_for(state)
    if handler is None:  # the rule has checked it; a matcher's state is its own copy
        return
    arg = state[PREFIX_KEY][CMD_ARG_KEY]
    arg = arg if arg is not None else Message()
    length = len(arg.extract_plain_text().strip())
    if length > COMMAND_ARG_MAX_CHARS:
        text = ARG_TOO_LONG.format(length=length, limit=COMMAND_ARG_MAX_CHARS)
        await send_answer(bot, event, text, max_chars=runtime.settings.chat_reply_max_chars)
        return
    async with serving_bot(bot, runtime):  # the command reads and deletes its bot's memory
        await handler(bot, event, arg, runtime)
