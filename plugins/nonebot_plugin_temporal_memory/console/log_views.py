"""The pages of what was done: the recycle bin (deleted items, restorable) and the audit log
(who changed what, the console's changes and the agents' MCP calls), in Chinese, sessions named
for their people and groups, not by key."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from memory_core.console import AuditEntry, BinItem, ChatNames

from .markup import Markup, join, render
from .views import BASE, Page, chat_link, layout, pager, where

TARGET_ZH = {"turn": "对话", "distilled": "提炼记忆"}
# Entries the MCP tools wrote in English before they wrote Chinese: shown in Chinese all the
# same (a recall's "query → 2 turn(s), 0 fact(s)", a search's "name → 3", a forget's counts).
LEGACY_ZH = (
    (
        re.compile(r"^(.*) → (\d+) turn\(s\), (\d+) fact\(s\)$", re.S),
        r"「\1」→ 对话 \2 条，事实 \3 条",
    ),
    (re.compile(r"^(.*) → (\d+)$", re.S), r"「\1」→ 找到 \2 个会话"),
    (re.compile(r"^memories (.*)$"), r"记忆 \1"),
    (re.compile(r"^the whole chat$"), "整个会话"),
    (re.compile(r"^nothing$"), "没有可删的"),
)
LEGACY_KINDS = {
    "dialogues": "对话", "bot_replies": "机器人的回复", "facts": "事实",
    "preferences": "偏好", "summaries": "摘要", "cached_answers": "缓存的回答",
}  # fmt: skip
_LEGACY_COUNTS = re.compile(r"^(?:(?:{}) \d+(?:, |$))+$".format("|".join(LEGACY_KINDS)))
CLEARED = Markup('<span class="muted">内容已清除（这一条已删除或被遗忘）</span>')


def chinese(text: str) -> str:
    """An MCP entry's text as the tools write it now (see ``LEGACY_ZH``)."""
    if _LEGACY_COUNTS.match(text):
        counts = (part.split(" ") for part in text.split(", "))
        return "、".join(f"{LEGACY_KINDS[kind]} {n} 条" for kind, n in counts)
    for pattern, replacement in LEGACY_ZH:
        if pattern.match(text):
            return pattern.sub(replacement, text)
    return text


def actor_zh(actor: str) -> str:
    """Who made a change: the console from an address, or an agent over MCP."""
    if actor.startswith("控制台@"):
        return f"控制台（{actor.removeprefix('控制台@')}）"
    if actor.startswith("mcp:"):
        return f"MCP 智能体（{actor.removeprefix('mcp:')}）"
    return actor


def what(e: AuditEntry) -> str:
    """The change as a short Chinese phrase."""
    item = f"{TARGET_ZH.get(e.target_kind, e.target_kind)} #{e.target_id}"
    on = e.after_text == "开"
    return {
        "edit": f"修改{item}",
        "delete": f"删除{item}",
        "restore": f"从回收站恢复{item}",
        "pin": f"置顶{item}",
        "unpin": f"取消置顶{item}",
        "group_switch": f"{'打开' if on else '关闭'}群记忆",
        "group_sharing": f"{'打开' if on else '关闭'}群友共享",
        "recall": "回忆",
        "remember": f"记住一句话（对话 #{e.target_id}）" if e.target_id else "记住一句话",
        "forget": "忘记整个会话" if e.target_kind == "session" else "忘记指定的记忆",
        "find": "按名字找人",
    }.get(e.action, e.action)


def said(e: AuditEntry) -> Markup:
    """The texts of an entry: before → after, a query and what it found, or why none."""
    before, after = (chinese(t) if t else "" for t in (e.before_text, e.after_text))
    if e.action in ("group_switch", "group_sharing"):
        return Markup("")
    if e.action == "delete" and not before:
        return Markup('<span class="muted">内容在回收站里（恢复或到期清除）</span>')
    if e.action == "find" and after == "0":
        return Markup('<span class="muted">没有找到任何人</span>')
    if e.action in ("recall", "find") and before:
        return render("「{q}」{a}", q=before, a=f"→ {after}" if after else "")
    if e.action == "forget" and (before or after):
        return render("{b}：{a}", b=before or "—", a=after or "—")
    if before and after and before != after:
        return render("<del>{b}</del> → <ins>{a}</ins>", b=before, a=after)
    if before or after:
        return render("{t}", t=after or before)
    return CLEARED


def audit_page(
    page: Page,
    entries: Sequence[AuditEntry],
    number: int,
    names: Mapping[str, ChatNames],
    groups: Mapping[int, str],
) -> Markup:
    """The log, newest first: when, what, in which chat (named), the texts, by whom."""

    def chat(e: AuditEntry) -> Markup:
        if e.target_kind == "group" and e.target_id is not None:
            return render("{g}", g=where(e.target_id, groups.get(e.target_id)))
        return chat_link(e.session_key, names)

    rows = join(
        render(
            '<tr class="audit"><td class="nowrap when meta plain" data-label="时间">{when}</td>'
            '<td class="lead" data-label="操作">{what}</td>'
            '<td class="nowrap meta plain" data-label="会话">{chat}</td>'
            '<td class="text" data-label="内容">{said}</td>'
            '<td class="nowrap who meta plain" data-label="操作人">{actor}</td></tr>',
            when=page.when(e.at),
            what=what(e),
            chat=chat(e),
            said=said(e),
            actor=actor_zh(e.actor),
        )
        for e in entries
    )
    table = (
        render(
            '<table class="stack"><thead><tr><th>时间</th><th>操作</th><th>会话</th><th>内容</th>'
            "<th>操作人</th></tr></thead><tbody>{rows}</tbody></table>",
            rows=rows,
        )
        if entries
        else Markup('<p class="muted">还没有任何修改。</p>')
    )
    return layout(
        page,
        "audit",
        "审计日志",
        render("{t}{p}", t=table, p=pager(f"{BASE}/audit", {}, number, len(entries))),
    )


def bin_page(
    page: Page, items: Sequence[BinItem], session_key: str, names: Mapping[str, ChatNames]
) -> Markup:
    rows = join(
        render(
            '<tr class="binned"><td class="nowrap meta plain" data-label="类型">{kind}</td>'
            '<td class="text" data-label="内容">{summary}</td>'
            '<td class="nowrap meta plain" data-label="会话">{chat}</td>'
            '<td class="nowrap when meta" data-label="删除">{when} '
            '<span class="muted">{who}</span></td>'
            '<td class="nowrap when meta" data-label="保留到">{until}</td>'
            '<td class="actions"><form method="post" action="{base}/bin/restore">{csrf}'
            '<input type="hidden" name="id" value="{id}">'
            '<button class="small" type="submit">恢复</button></form></td></tr>',
            kind=TARGET_ZH.get(b.kind, b.kind),
            summary=b.summary,
            chat=chat_link(b.session_key, names),
            when=page.when(b.deleted_at),
            who=actor_zh(b.deleted_by),
            until=page.when(b.purge_after),
            base=BASE,
            csrf=page.csrf_field(),
            id=b.id,
        )
        for b in items
    )
    scope = (
        render(
            '<p class="muted">只看{chat}的。<a href="{base}/bin">看全部</a></p>',
            chat=chat_link(session_key, names),
            base=BASE,
        )
        if session_key
        else Markup("")
    )
    table = (
        render(
            '<table class="stack"><thead><tr><th>类型</th><th>内容</th><th>会话</th>'
            "<th>删除时间</th><th>保留到</th><th></th></tr></thead><tbody>{rows}</tbody></table>",
            rows=rows,
        )
        if items
        else Markup('<p class="muted">回收站是空的。</p>')
    )
    return layout(page, "bin", "回收站", render("{scope}{table}", scope=scope, table=table))
