"""/群共享 with nonebug: who may switch, what the state says, and that it narrows or widens
recall for that group only."""

from __future__ import annotations

from typing import Any

from nonebot.adapters.onebot.v11 import Adapter, MessageEvent
from nonebug import App

from memory_core.recall.options import RecallOptions
from tests.plugin.events import message_payload, text_seg
from tests.plugin.test_commands import GROUP, USER, event_of, run, seed

OTHER = 30001
# The plugin is imported only once nonebug has initialised NoneBot (the ``app`` fixture).
NOT_ALLOWED = "只有群主、管理员或超级用户可以开关本群的共享记忆。"
OFF_STATE = (
    "本群未开启共享记忆：每个人只能让我想起自己说过的话。群主或管理员发送 /群共享 开 可开启。"
)


def group_event(value: str, role: str, *, user_id: int = USER, group_id: int = GROUP) -> Any:
    payload = message_payload([text_seg(value)], user_id=user_id, group_id=group_id)
    payload["sender"]["role"] = role
    event = Adapter.json_to_event(payload)
    assert isinstance(event, MessageEvent)
    return event


async def recalled(runtime: Any, user: int, group: int | None) -> set[str]:
    result = await runtime.memory.parts.retriever.recall(
        user, "我的鱼叫什么", group, RecallOptions(top_n=5)
    )
    return {t.content for t in result.turns}


async def test_members_see_the_state_and_only_owners_admins_or_superusers_switch_it(
    app: App, runtime
):
    from nonebot_plugin_temporal_memory.commands.group_sharing import SHARE_USAGE, SHARED_ON

    await seed(runtime)
    await run(
        app,
        (group_event("/群共享", "member"), OFF_STATE),
        (group_event("/群共享 开", "member"), NOT_ALLOWED),
        (group_event("/群共享 开", "admin"), SHARED_ON),
        (group_event("/groupshare on", "owner"), "本群的共享记忆本来就是开启的。"),
        (group_event("/群共享 好的", "admin"), SHARE_USAGE),
        (event_of("/群共享 开"), SHARE_USAGE),  # a private chat has nothing to share
    )
    status = await runtime.memory.parts.sharing.status(GROUP)
    assert status.shared and status.changed_by == USER and status.changed_at is not None
    stamp = status.changed_at.astimezone(runtime.memory.parts.tz).strftime("%m-%d %H:%M")
    await run(
        app,
        (
            group_event("/群共享", "member", user_id=OTHER),
            f"本群已开启共享记忆（QQ {USER} 于 {stamp} 开启）："
            "每个人对我说过的话，其他成员也能让我想起。",
        ),
    )


async def test_switching_sharing_widens_and_narrows_recall_in_that_group_only(app: App, runtime):
    from nonebot_plugin_temporal_memory.commands.group_sharing import SHARED_OFF, SHARED_ON

    await seed(runtime)  # another member of GROUP said 我的鱼叫泡泡
    assert "我的鱼叫泡泡" not in await recalled(runtime, USER, GROUP)
    await run(app, (group_event("/群共享 开", "owner"), SHARED_ON))
    assert "我的鱼叫泡泡" in await recalled(runtime, USER, GROUP)
    assert "我的鱼叫泡泡" not in await recalled(runtime, USER, 40004)
    assert "我的鱼叫泡泡" not in await recalled(runtime, USER, None)
    await run(app, (group_event("/群共享 关", "admin"), SHARED_OFF))
    assert "我的鱼叫泡泡" not in await recalled(runtime, USER, GROUP)
    # Nothing was deleted by switching.
    assert "我的鱼叫泡泡" in await recalled(runtime, OTHER, GROUP)
