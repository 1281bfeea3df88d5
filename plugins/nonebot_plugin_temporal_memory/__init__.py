"""TemporalMemory: a QQ chat bot whose replies draw on long-term, time-aware memory."""

from nonebot import require
from nonebot.plugin import PluginMetadata

require("nonebot_plugin_localstore")

from .commands.help import USAGE  # noqa: E402
from .config import Config  # noqa: E402

HOMEPAGE = "https://github.com/temporal-memory/temporal-memory"
"""The project page named in the NoneBot store and in ``plugins/pyproject.toml``."""

__plugin_meta__ = PluginMetadata(
    name="TemporalMemory",
    description="带时间感知长期记忆的 QQ 聊天机器人：私聊与群聊、记忆回忆、管理命令",
    usage=USAGE,  # /帮助 answers from the same lines (commands.help)
    type="application",
    homepage=HOMEPAGE,
    config=Config,
    supported_adapters={"~onebot.v11"},
)

from . import (  # noqa: E402, F401
    console,
    handlers,
    intake,
    log_redaction,
    mcp_http,
    runtime,
)
from .commands import (  # noqa: E402, F401
    forget,
    group_sharing,
    memstat,
    menu,
    recall,
    remember,
    self_service,
)
from .guards import (  # noqa: E402, F401
    body_limit,
    http_event_guard,
    ws_access_guard,
    ws_frame_guard,
)
