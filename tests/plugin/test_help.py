"""/帮助 lists what the asker may use, where they ask; the list is the one the store shows."""

from __future__ import annotations

from typing import Any

from nonebot.adapters.onebot.v11 import Message
from nonebug import App

from tests.plugin.events import SUPERUSER_ID
from tests.plugin.test_commands import GROUP, event_of, run

MEMBER_GROUP_LINE = "/群共享（groupshare）看本群是否共享记忆"
ADMIN_LINE = "/群记忆 开|关"
SUPERUSER_LINE = "/记忆统计（memstat）"


class Showing:
    """An expected help answer: 8 to 10 lines, holding every ``shown`` and no ``hidden``."""

    def __init__(self, shown: tuple[str, ...], hidden: tuple[str, ...]) -> None:
        self.shown, self.hidden = shown, hidden

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Message):
            return False
        text = other.extract_plain_text()
        lines = text.splitlines()
        return (
            8 <= len(lines) <= 10
            and all(s in text for s in self.shown)
            and not any(h in text for h in self.hidden)
        )

    def __repr__(self) -> str:
        return f"Showing({self.shown}, hiding {self.hidden})"


EVERYONE = ("/回忆 <内容>", "/记住 <内容>", "/我的记忆", "/忘记我", "/导出我的记忆", "/不记我")


async def test_help_in_private_lists_a_persons_commands_and_no_admin_or_group_ones(
    app: App, runtime, model
):
    hidden = (SUPERUSER_LINE, ADMIN_LINE, MEMBER_GROUP_LINE, "超级用户")
    expected = Showing(EVERYONE, hidden)
    await run(
        app, *((event_of(word), expected) for word in ("/帮助", "/help", "/菜单", "/记忆帮助"))
    )
    assert model.prompts == []


async def test_help_shows_the_superusers_commands_to_a_superuser_only(app: App, runtime):
    shown = (*EVERYONE, SUPERUSER_LINE)
    await run(app, (event_of("/帮助", user_id=SUPERUSER_ID), Showing(shown, (ADMIN_LINE,))))


async def test_help_in_a_group_shows_its_switches_to_its_admins_only(app: App, runtime):
    member = event_of("/帮助", group_id=GROUP)
    admin = event_of("/帮助", group_id=GROUP)
    admin.sender.role = "admin"  # type: ignore[attr-defined]
    await run(
        app,
        (member, Showing((*EVERYONE, MEMBER_GROUP_LINE), (ADMIN_LINE, SUPERUSER_LINE))),
        (admin, Showing((*EVERYONE, ADMIN_LINE), (MEMBER_GROUP_LINE, SUPERUSER_LINE))),
        (
            event_of("/帮助", user_id=SUPERUSER_ID, group_id=GROUP),
            Showing((*EVERYONE, ADMIN_LINE, SUPERUSER_LINE), (MEMBER_GROUP_LINE,)),
        ),
    )


def test_every_command_has_a_help_line_and_every_help_line_a_command(plugin: Any) -> None:
    import nonebot_plugin_temporal_memory as package
    from nonebot_plugin_temporal_memory.commands.dispatch import _handlers
    from nonebot_plugin_temporal_memory.commands.help import HELP_LINES, USAGE

    registered = {words[0] for words in _handlers}
    described = {word for line in HELP_LINES for word in line.commands}
    assert registered == described
    # The store shows the same lines, every one of them.
    assert package.__plugin_meta__.usage == USAGE
    assert all(line.text in USAGE for line in HELP_LINES)
