"""What every console page shares: the page frame (header, navigation, messages), the login
form, links and pagers. Every value is escaped by ``markup.render``; nothing here reads the
database. The pages themselves: ``memory_views`` (sessions and what they remember) and
``admin_views`` (bin, audit log, charts, debugger, settings)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

from memory_core import MemoryTurn
from memory_core.console import PAGE_SIZE, ChatNames, SessionRow, chat_of_key

from .markup import Markup, join, render

BASE = "/memory"
NAV = (
    ("overview", "概览", f"{BASE}/"),
    ("sessions", "会话", f"{BASE}/sessions"),
    ("bin", "回收站", f"{BASE}/bin"),
    ("audit", "审计日志", f"{BASE}/audit"),
    ("debug", "回忆调试", f"{BASE}/debug"),
    ("settings", "设置", f"{BASE}/settings"),
)
KIND_ZH = {"facts": "事实", "preferences": "偏好", "summary": "摘要"}
CHAT_ZH = {"private": "私聊", "group": "群聊"}


@dataclass(frozen=True)
class Page:
    """What every page shares: the clock, the CSRF token, a notice or an error to show."""

    tz: ZoneInfo
    csrf: str
    notice: str = ""
    error: str = ""

    def when(self, moment: datetime | None) -> str:
        return "—" if moment is None else f"{moment.astimezone(self.tz):%Y-%m-%d %H:%M}"

    def csrf_field(self) -> Markup:
        return render('<input type="hidden" name="csrf" value="{csrf}">', csrf=self.csrf)


def document(title: str, body: Markup) -> Markup:
    return render(
        '<!doctype html><html lang="zh-CN"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>{title} · 记忆控制台</title>"
        '<link rel="stylesheet" href="{base}/style.css"></head><body>{body}</body></html>',
        title=title,
        base=BASE,
        body=body,
    )


def layout(page: Page, current: str, title: str, body: Markup) -> Markup:
    links = join(
        render(
            '<a href="{href}" class="{cls}">{label}</a>',
            href=href,
            cls="on" if key == current else "",
            label=label,
        )
        for key, label, href in NAV
    )
    messages = Markup("")
    if page.notice:
        messages = render('<div class="notice" role="status">{text}</div>', text=page.notice)
    if page.error:
        messages = render(
            '{before}<div class="error" role="alert">{text}</div>', before=messages, text=page.error
        )
    # Content first in the page: on a phone the navigation follows it (the bar's 菜单 jumps
    # there); on a wide screen the style sheet shows it as the top bar.
    header = Markup(
        '<header class="bar"><strong>记忆控制台</strong><a class="menu" href="#nav">菜单 ↓</a>'
        "</header>"
    )
    nav = render(
        '<nav id="nav" aria-label="控制台导航"><strong>记忆控制台</strong>{links}'
        '<form method="post" action="{base}/logout">{csrf}'
        '<button class="plain" type="submit">退出</button></form></nav>',
        links=links,
        base=BASE,
        csrf=page.csrf_field(),
    )
    return document(
        title,
        render(
            "{header}<main><h1>{title}</h1>{messages}{body}</main>{nav}",
            header=header,
            title=title,
            messages=messages,
            body=body,
            nav=nav,
        ),
    )


def button_form(
    page: Page, action: str, fields: Mapping[str, object], label: str, css: str = ""
) -> Markup:
    """A one-button POST form to ``{BASE}{action}`` carrying the CSRF token and ``fields``."""
    hidden = join(
        render('<input type="hidden" name="{name}" value="{value}">', name=name, value=value)
        for name, value in fields.items()
    )
    return render(
        '<form method="post" action="{base}{action}">{csrf}{hidden}'
        '<button class="{css}" type="submit">{label}</button></form>',
        base=BASE,
        action=action,
        csrf=page.csrf_field(),
        hidden=hidden,
        css=css,
        label=label,
    )


def login_page(error: str = "") -> Markup:
    shown = render('<div class="error" role="alert">{e}</div>', e=error) if error else Markup("")
    return document(
        "登录",
        render(
            '<form class="login" method="post" action="{base}/login">'
            "<h1>记忆控制台</h1>{shown}"
            '<label>控制台令牌<input type="password" name="token" autocomplete="current-password"'
            ' required autofocus></label><button type="submit">登录</button></form>',
            base=BASE,
            shown=shown,
        ),
    )


def session_link(key: str) -> str:
    return f"{BASE}/session?{urlencode({'key': key})}"


def where(group_id: int | None, group_name: str | None) -> str:
    """The chat as an operator names it: 私聊, the group's name, or its number when the QQ
    client has not said the name."""
    if group_id is None:
        return "私聊"
    return f"群“{group_name}”" if group_name else f"群 {group_id}"


def who(row: SessionRow) -> Markup:
    name = row.name or "（无昵称）"
    return render(
        '<a href="{href}">{name}</a><div class="muted">QQ {user} · {where}</div>',
        href=session_link(row.session_key),
        name=name,
        user=row.user_id,
        where=where(row.group_id, row.group_name),
    )


def chat_link(key: str | None, names: Mapping[str, ChatNames]) -> Markup:
    """A session named for a person (``名字 · 私聊`` / ``名字 · 群“周会”``), linked to its page;
    its key only when it is no chat's."""
    if not key:
        return Markup("—")
    chat, named = chat_of_key(key), names.get(key, ChatNames())
    if chat is None:
        return render("{key}", key=key)
    person = named.person or f"QQ {chat[0]}"
    return render(
        '<a href="{href}">{person}</a> <span class="muted">· {where}</span>',
        href=session_link(key),
        person=person,
        where=where(chat[1], named.group),
    )


def pager(path: str, query: dict[str, str], number: int, shown: int) -> Markup:
    links: list[Markup] = []
    if number > 0:
        links.append(
            render(
                '<a href="{h}">上一页</a>', h=f"{path}?{urlencode({**query, 'page': number - 1})}"
            )
        )
    if shown >= PAGE_SIZE:
        links.append(
            render(
                '<a href="{h}">下一页</a>', h=f"{path}?{urlencode({**query, 'page': number + 1})}"
            )
        )
    return render('<div class="pager">{links}</div>', links=join(links))


def speaker(turn: MemoryTurn) -> str:
    if turn.role == "assistant":
        return "机器人"
    return turn.sender_name or f"QQ {turn.user_id}"


def query_string(values: dict[str, object]) -> str:
    return urlencode({k: "" if v is None else str(v) for k, v in values.items()})
