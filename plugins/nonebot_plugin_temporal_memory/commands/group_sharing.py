"""/群共享 开|关 (groupshare on|off): a group's owner, admins or a superuser let every member
recall what the others said to the bot in that group (``memory_core.recall.sharing``);
/群共享 alone says whether the group is shared, to anyone in it."""

from nonebot.adapters.onebot.v11 import Bot, Message, MessageEvent
from nonebot.log import logger

from memory_core import MemoryCoreError, SharingStatus

from ..runtime import Runtime
from .common import DB_DOWN, reply
from .dispatch import plugin_command
from .self_service import read_group_switch

SHARE_USAGE = (
    "用法：在群里发送 /群共享 查看本群是否共享记忆；群主或管理员发送 /群共享 开（groupshare on）"
    "让群里每个人都能让我想起其他成员在本群对我说过的话，/群共享 关 恢复各人独立。"
)
NOT_ALLOWED = "只有群主、管理员或超级用户可以开关本群的共享记忆。"
SHARED_ON = (
    "已开启本群的共享记忆：群里每个人对我说过的话，其他成员问起时我也能想起（会说明是谁说的）；"
    "别的群和私聊里想不起。各人仍可用 /忘记我 删除自己说过的话。发送 /群共享 关 关闭。"
)
SHARED_OFF = "已关闭本群的共享记忆：每个人只能让我想起自己说过的话。已有的记忆不删除。"


@plugin_command("群共享", "groupshare")
async def handle_group_share(
    bot: Bot, event: MessageEvent, args: Message, runtime: Runtime
) -> None:
    switch = await read_group_switch(
        bot, event, args, runtime, usage=SHARE_USAGE, refusal=NOT_ALLOWED, word_required=False
    )
    if switch is None:
        return
    group_id, on = switch
    try:
        if on is None:
            text = status_text(await runtime.memory.parts.sharing.status(group_id), runtime)
        elif await runtime.memory.parts.sharing.switch(group_id, on=on, by=event.user_id):
            text = SHARED_ON if on else SHARED_OFF
        else:
            text = f"本群的共享记忆本来就是{'开启' if on else '关闭'}的。"
    except MemoryCoreError as exc:
        logger.warning(f"/群共享 failed: {exc}")
        text = DB_DOWN
    await reply(bot, event, runtime, text)


def status_text(status: SharingStatus, runtime: Runtime) -> str:
    """``本群已开启共享记忆（QQ 123 于 11-30 20:28 开启）。`` and how to switch."""
    state = "已开启" if status.shared else "未开启"
    if status.source == "setting":
        why = "（机器人的设置）" if status.shared else ""
    else:
        at = status.changed_at
        parts = [f"QQ {status.changed_by}" if status.changed_by is not None else "管理员"]
        if at is not None:
            parts.append(f"于 {at.astimezone(runtime.memory.parts.tz):%m-%d %H:%M}")
        parts.append("开启" if status.shared else "关闭")
        why = f"（{' '.join(parts)}）"
    if status.shared:
        return f"本群{state}共享记忆{why}：每个人对我说过的话，其他成员也能让我想起。"
    return (
        f"本群{state}共享记忆{why}：每个人只能让我想起自己说过的话。"
        "群主或管理员发送 /群共享 开 可开启。"
    )
