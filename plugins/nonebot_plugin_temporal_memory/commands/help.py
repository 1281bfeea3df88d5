"""The commands a person may use, written once: /帮助 answers from this list, filtered by who
asks and where, and ``__plugin_meta__.usage`` (what the NoneBot store shows) is all of it.

Each entry names the commands it describes (``commands``, as registered with
``dispatch.plugin_command``); a test holds the two to each other, so a new command
without a help line, or a line for a command that is gone, fails it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Audience(Enum):
    """Who a help line is for, and where it applies."""

    EVERYONE = "everyone"
    GROUP_MEMBER = "group member"  # in a group, anyone but its owner, admins and superusers
    GROUP_ADMIN = "group admin"  # in a group, its owner, an admin or a superuser
    SUPERUSER = "superuser"


@dataclass(frozen=True)
class HelpLine:
    text: str
    audience: Audience
    commands: tuple[str, ...] = ()


HELP_LINES = (
    HelpLine(
        "私聊直接说话，群里 @我、回复我或叫我的名字；/帮助（help、菜单）看这份说明",
        Audience.EVERYONE,
        ("帮助", "help", "菜单", "记忆帮助"),
    ),
    HelpLine("/回忆 <内容>（recall）查看会被想起的记忆", Audience.EVERYONE, ("recall", "回忆")),
    HelpLine("/记住 <内容>（remember）记下一条永久笔记", Audience.EVERYONE, ("remember", "记住")),
    HelpLine(
        "/我的记忆 [页码]（mymem）我记得的关于你的事实和偏好",
        Audience.EVERYONE,
        ("我的记忆", "mymem"),
    ),
    HelpLine(
        "/忘记 <编号|词语> 删除其中几条；/忘记 删除本会话的记忆（需确认）",
        Audience.EVERYONE,
        ("forget", "忘记"),
    ),
    HelpLine(
        "/忘记我（forgetme）删除你在所有会话中的记忆（需确认）",
        Audience.EVERYONE,
        ("忘记我", "forgetme"),
    ),
    HelpLine(
        "/导出我的记忆（exportmem）把你的全部记录私聊发给你",
        Audience.EVERYONE,
        ("导出我的记忆", "exportmem"),
    ),
    HelpLine(
        "/不记我 [全部]（optout）不再记录你；/记我 [全部]（optin）恢复",
        Audience.EVERYONE,
        ("不记我", "optout", "记我", "optin"),
    ),
    HelpLine(
        "/群共享（groupshare）看本群是否共享记忆", Audience.GROUP_MEMBER, ("群共享", "groupshare")
    ),
    HelpLine(
        "/群共享 [开|关]、/群记忆 开|关（groupmem）开关本群的共享记忆、本群的记忆（群主或管理员）",
        Audience.GROUP_ADMIN,
        ("群共享", "groupshare", "群记忆", "groupmem"),
    ),
    HelpLine(
        "/记忆统计（memstat）；/忘记 用户 <QQ号>|群 <群号>|全部；/回忆 加 --user/--group/--private"
        "（超级用户）",
        Audience.SUPERUSER,
        ("memstat", "记忆统计"),
    ),
)

USAGE = "\n".join(line.text for line in HELP_LINES)
"""Every line: what the NoneBot store shows as the plugin's usage."""


def help_text(*, in_group: bool, group_admin: bool, superuser: bool) -> str:
    """The lines for this asker: the group's lines only in a group (its switches only for its
    owner, admins and superusers), the superuser's only for a superuser."""
    allowed = {Audience.EVERYONE}
    if in_group:
        allowed.add(Audience.GROUP_ADMIN if group_admin or superuser else Audience.GROUP_MEMBER)
    if superuser:
        allowed.add(Audience.SUPERUSER)
    return "\n".join(line.text for line in HELP_LINES if line.audience in allowed)
