"""TemporalMemory: a QQ chat bot whose replies draw on long-term, time-aware memory."""

from nonebot import require
from nonebot.plugin import PluginMetadata

require("nonebot_plugin_localstore")

from .config import Config  # noqa: E402

HOMEPAGE = "https://github.com/temporal-memory/temporal-memory"
"""The project page named in the NoneBot store and in ``plugins/pyproject.toml``."""

__plugin_meta__ = PluginMetadata(
    name="TemporalMemory",
    description="带时间感知长期记忆的 QQ 聊天机器人：私聊与群聊、记忆回忆、管理命令",
    usage=(
        "私聊直接说话；群里 @机器人、回复机器人的消息或以昵称开头。\n"
        "/forget（忘记）删除你在当前会话的记忆（需确认）\n"
        "/recall <内容>（回忆）查看会被想起的记忆\n"
        "/remember <内容>（记住）记下一条永久笔记\n"
        "/我的记忆 [页码]（mymem）查看我记得的关于你的事实和偏好\n"
        "/忘记 <编号|词语> 删除其中一条或包含该词的几条（需确认）\n"
        "/忘记我（forgetme）删除你在所有会话中的全部记忆（需确认）\n"
        "/导出我的记忆（exportmem）把关于你的全部记录私聊发给你\n"
        "/不记我 [全部]（optout）不再记录你；/记我 [全部]（optin）恢复\n"
        "/群记忆 关|开（groupmem）群主或管理员开关本群的记忆\n"
        "/群共享 [开|关]（groupshare）查看或开关本群成员共享记忆（群主或管理员开关）\n"
        "/memstat（记忆统计）记忆统计（超级用户）"
    ),
    type="application",
    homepage=HOMEPAGE,
    config=Config,
    supported_adapters={"~onebot.v11"},
)

from . import (  # noqa: E402, F401
    body_limit,
    commands,
    console,
    group_sharing,
    handlers,
    http_event_guard,
    intake,
    log_redaction,
    mcp_http,
    runtime,
    self_service,
    ws_access_guard,
    ws_frame_guard,
)
