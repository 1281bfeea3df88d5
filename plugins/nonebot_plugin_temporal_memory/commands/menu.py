"""/帮助 (help, 菜单, 记忆帮助): the commands this person may use here, from ``help``."""

from nonebot.adapters.onebot.v11 import Bot, Message, MessageEvent
from nonebot.adapters.onebot.v11.permission import GROUP_ADMIN, GROUP_OWNER

from ..intake import group_id_of
from ..runtime import Runtime
from .common import is_superuser, reply
from .dispatch import plugin_command
from .help import help_text


@plugin_command("帮助", "help", "菜单", "记忆帮助")
async def handle_help(bot: Bot, event: MessageEvent, _args: Message, runtime: Runtime) -> None:
    """The commands this person may use here (``help``)."""
    in_group = group_id_of(event) is not None
    text = help_text(
        in_group=in_group,
        group_admin=in_group and bool(await (GROUP_ADMIN | GROUP_OWNER)(bot, event)),
        superuser=await is_superuser(bot, event),
    )
    await reply(bot, event, runtime, text)
