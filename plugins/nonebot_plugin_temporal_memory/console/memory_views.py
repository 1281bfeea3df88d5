"""The pages of what the bot remembers: the session list and one session's memory browser
(distilled memories with their sources, turns, search, edit and delete forms)."""

from __future__ import annotations

from collections.abc import Sequence

from memory_core import DistilledMemory, MemoryTurn, RetentionPolicy
from memory_core.console import (
    CATEGORY_ZH,
    PAGE_SIZE,
    FoundTurn,
    SessionRow,
    TurnPage,
    TurnSearch,
    band_label,
)

from .derived import marked_text
from .markup import Markup, join, render
from .views import (
    BASE,
    CHAT_ZH,
    KIND_ZH,
    Page,
    button_form,
    layout,
    pager,
    query_string,
    speaker,
    where,
    who,
)


def sessions_page(
    page: Page,
    rows: Sequence[SessionRow],
    *,
    chat_type: str,
    group: str,
    user: str,
    number: int,
) -> Markup:
    options = join(
        render(
            '<option value="{v}"{s}>{label}</option>',
            v=v,
            s=Markup(" selected" if v == chat_type else ""),
            label=label,
        )
        for v, label in (("", "全部"), ("private", "私聊"), ("group", "群聊"))
    )
    filters = render(
        '<form class="filters" method="get" action="{base}/sessions">'
        '<label>类型<select name="type">{options}</select></label>'
        '<label>群号<input name="group" value="{group}" inputmode="numeric" size="12"></label>'
        '<label>QQ 号<input name="user" value="{user}" inputmode="numeric" size="12"></label>'
        '<button type="submit">筛选</button></form>',
        base=BASE,
        options=options,
        group=group,
        user=user,
    )
    body_rows = join(
        render(
            '<tr class="session"><td class="nowrap who plain" data-label="会话">{who}</td>'
            '<td class="nowrap meta plain" data-label="类型">{kind}</td>'
            '<td class="nowrap num meta" data-label="对话">{turns}</td>'
            '<td class="nowrap num meta" data-label="记忆">{memories}</td>'
            '<td class="nowrap when meta" data-label="最近">{last}</td></tr>',
            who=who(r),
            kind=CHAT_ZH.get(r.chat_type, r.chat_type),
            turns=r.turns,
            memories=r.memories,
            last=page.when(r.last_at),
        )
        for r in rows
    )
    table = (
        render(
            '<table class="stack"><thead><tr><th>会话</th><th>类型</th><th>对话</th><th>记忆</th>'
            "<th>最近活动</th></tr></thead><tbody>{rows}</tbody></table>",
            rows=body_rows,
        )
        if rows
        else Markup('<p class="muted">没有符合条件的会话。</p>')
    )
    query = {"type": chat_type, "group": group, "user": user}
    return layout(
        page,
        "sessions",
        "会话",
        render(
            "{filters}{table}{pager}",
            filters=filters,
            table=table,
            pager=pager(f"{BASE}/sessions", query, number, len(rows)),
        ),
    )


def _band(turn: MemoryTurn, policy: RetentionPolicy | None) -> str:
    if turn.score is None:
        return "未评分"
    if policy is None:
        return str(turn.score)
    return f"{turn.score} · {band_label(policy.band_for(turn.score).name)}"


def _expiry(page: Page, turn: MemoryTurn, pinned: bool) -> str:
    if pinned:
        return "已置顶 · 不过期"
    return "不过期" if turn.expires_at is None else page.when(turn.expires_at)


SELECTION_FORM = "selection"  # the form the rows' checkboxes belong to (HTML form attribute)


def _select_box(kind: str, item_id: int) -> Markup:
    return render(
        '<input type="checkbox" name="item" value="{kind}:{id}" form="{form}" '
        'aria-label="选中 #{id}">',
        kind=kind,
        id=item_id,
        form=SELECTION_FORM,
    )


def _selection_form(page: Page, key: str) -> Markup:
    """One form for the rows' checkboxes (each row holds forms of its own, and forms do not
    nest): it moves every checked turn and memory into the recycle bin."""
    return render(
        '<form id="{form}" class="selection" method="post" action="{base}/delete-selected">'
        '{csrf}<input type="hidden" name="key" value="{key}">'
        '<button class="danger" type="submit" title="勾选下面的记忆或对话；可在回收站逐条恢复">'
        "删除选中的条目</button></form>",
        form=SELECTION_FORM,
        base=BASE,
        csrf=page.csrf_field(),
        key=key,
    )


def _pin_form(page: Page, kind: str, key: str, item_id: int, pinned: bool) -> Markup:
    fields = {"kind": kind, "key": key, "id": item_id, "pinned": "0" if pinned else "1"}
    label = "取消置顶" if pinned else "置顶"
    # Quiet: a row's buttons are small, and only the delete has a colour.
    return button_form(page, "/pin", fields, label, "small quiet pin")


def _delete_form(page: Page, kind: str, key: str, item_id: int) -> Markup:
    fields = {"kind": kind, "key": key, "id": item_id}
    return button_form(page, "/delete", fields, "删除", "small danger")


def _edit_form(page: Page, action: str, key: str, item_id: int, text: str) -> Markup:
    return render(
        '<details class="edit"><summary class="small quiet">修改</summary>'
        '<form method="post" action="{base}/{action}">{csrf}'
        '<input type="hidden" name="key" value="{key}"><input type="hidden" name="id" value="{id}">'
        '<textarea name="text" required>{text}</textarea>'
        '<button type="submit">保存（重新生成向量）</button></form></details>',
        base=BASE,
        action=action,
        csrf=page.csrf_field(),
        key=key,
        id=item_id,
        text=text,
    )


def _turn_rows(
    page: Page, key: str, found: Sequence[FoundTurn], policy: RetentionPolicy | None
) -> Markup:
    rows = []
    for item in found:
        t = item.turn
        similarity = "" if item.similarity is None else f" · 相似度 {item.similarity:.3f}"
        rows.append(
            render(
                '<tr class="turn{pinned_cls}" id="turn-{id}">'
                '<td class="nowrap when meta plain" data-label="时间">{select} {when}'
                ' <span class="muted">#{id}{sim}</span></td>'
                '<td class="nowrap who meta plain" data-label="说话人">{who}</td>'
                '<td class="nowrap meta" data-label="评分">{band}</td>'
                '<td class="nowrap when meta" data-label="过期">{expiry}</td>'
                '<td class="text" data-label="内容">{text}</td>'
                '<td class="actions"><div class="row-actions">{edit}{pin}{delete}</div></td></tr>',
                id=t.id,
                pinned_cls=" pinned" if item.pinned else "",
                select=_select_box("turn", t.id),
                when=page.when(t.created_at),
                sim=similarity,
                who=speaker(t),
                band=_band(t, policy),
                expiry=_expiry(page, t, item.pinned),
                text=marked_text(t.content),
                edit=_edit_form(page, "turn/edit", key, t.id, t.content),
                pin=_pin_form(page, "turn", key, t.id, item.pinned),
                delete=_delete_form(page, "turn", key, t.id),
            )
        )
    if not rows:
        return Markup('<p class="muted">没有找到对话。</p>')
    return render(
        '<table class="stack"><thead><tr><th>时间</th><th>说话人</th><th>评分</th><th>过期</th>'
        "<th>内容</th><th></th></tr></thead><tbody>{rows}</tbody></table>",
        rows=join(rows),
    )


def _memory_rows(
    page: Page,
    key: str,
    memories: Sequence[DistilledMemory],
    sources: dict[int, list[MemoryTurn]],
    pinned: set[int],
) -> Markup:
    rows = []
    for m in memories:
        state = (
            Markup('<span class="tag">当前</span>')
            if m.current
            else render(
                '<span class="tag old">历史（{until} 起被取代）</span>',
                until=page.when(m.valid_until),
            )
        )
        category = CATEGORY_ZH.get(m.category or "", m.category or "")
        source_items = join(
            render(
                "<li>{when} {who}：{text}</li>",
                when=page.when(t.created_at),
                who=speaker(t),
                text=t.content[:120],
            )
            for t in sources.get(m.id, [])
        )
        source_block = (
            render(
                "<details><summary>来源 {n} 条</summary><ul>{items}</ul></details>",
                n=len(sources.get(m.id, [])),
                items=source_items,
            )
            if sources.get(m.id)
            else Markup('<span class="muted">来源已不在</span>')
        )
        rows.append(
            render(
                '<tr class="memory{pinned_cls}" id="memory-{id}">'
                '<td class="nowrap meta plain" data-label="类型">{select} {kind} {state}{pin_tag}'
                ' <span class="muted">{category}</span></td>'
                '<td class="text" data-label="内容">{text}</td>'
                '<td class="nowrap when meta plain" data-label="时间">首次 {first} · 确认 {last}'
                '<div class="muted">提到 {times} 次 · 重要度 {importance}</div></td>'
                '<td class="meta plain" data-label="来源">{sources}</td>'
                '<td class="actions"><div class="row-actions">{edit}{pin}{delete}</div></td></tr>',
                id=m.id,
                pinned_cls=" pinned" if m.id in pinned else "",
                select=_select_box("distilled", m.id),
                pin_tag=Markup(' <span class="tag pin">已置顶</span>')
                if m.id in pinned
                else Markup(""),
                pin=_pin_form(page, "distilled", key, m.id, m.id in pinned),
                kind=KIND_ZH.get(m.kind, m.kind),
                state=state,
                category=category,
                text=m.content,
                first=page.when(m.first_seen),
                last=page.when(m.last_confirmed),
                times=m.times_mentioned,
                importance=f"{m.importance:.2f}",
                sources=source_block,
                edit=_edit_form(page, "memory/edit", key, m.id, m.content)
                if m.current
                else Markup(""),
                delete=_delete_form(page, "distilled", key, m.id),
            )
        )
    if not rows:
        return Markup('<p class="muted">没有提炼出的记忆。</p>')
    return render(
        '<table class="stack"><thead><tr><th>类型</th><th>内容</th><th>时间</th><th>来源</th><th>'
        "</th>"
        "</tr></thead><tbody>{rows}</tbody></table>",
        rows=join(rows),
    )


def hit_count(search: TurnSearch, found: TurnPage) -> Markup:
    """How many turns the search found, and below which relevance a meaning search cut."""
    if not search.text.strip():
        return Markup("")
    if search.by_meaning:
        cut = "未设相关度下限" if found.floor is None else f"相关度 ≥ {found.floor:.2f}"
        if found.total == 0:
            text = f"没有找到相关的对话（{cut}）。"
        else:
            text = f"找到{'至少 ' if found.capped else ' '}{found.total} 条（{cut}）"
    elif found.total is None:
        text = f"找到 {PAGE_SIZE} 条以上，分页显示"
    else:
        text = f"找到 {found.total} 条" if found.total else "没有找到包含这个词的对话。"
    return render('<p class="hits" role="status">{text}</p>', text=text)


def session_page(
    page: Page,
    row: SessionRow,
    search: TurnSearch,
    *,
    start_text: str,
    end_text: str,
    found: TurnPage,
    memories: Sequence[DistilledMemory],
    sources: dict[int, list[MemoryTurn]],
    pinned_memories: set[int],
    policy: RetentionPolicy | None,
) -> Markup:
    mode = "meaning" if search.by_meaning else "keyword"
    modes = join(
        render(
            '<option value="{v}"{s}>{label}</option>',
            v=v,
            s=Markup(" selected" if v == mode else ""),
            label=label,
        )
        for v, label in (("keyword", "关键词"), ("meaning", "语义"))
    )
    # The title names the person: the line under it says where, how much and how recent.
    summary = render(
        '<p class="summary muted">QQ {user} · {where} · 对话 {turns} 条 · 当前记忆 {memories} 条'
        ' · <span class="nowrap">最近 {last}</span>'
        ' · <a href="{debug}">在回忆调试中以此会话提问</a>'
        ' · <a href="{bin}">此会话的回收站</a></p>',
        user=row.user_id,
        where=where(row.group_id, row.group_name),
        turns=row.turns,
        memories=row.memories,
        last=page.when(row.last_at),
        debug=f"{BASE}/debug?" + query_string({"user": row.user_id, "group": row.group_id or ""}),
        bin=f"{BASE}/bin?" + query_string({"key": row.session_key}),
    )
    filters = render(
        '<form class="filters" method="get" action="{base}/session" role="search">'
        '<input type="hidden" name="key" value="{key}">'
        '<label>搜索<input name="q" value="{q}" size="20"></label>'
        '<label>方式<select name="mode">{modes}</select></label>'
        '<label>从<input type="date" name="from" value="{start}"></label>'
        '<label>到<input type="date" name="to" value="{end}"></label>'
        '<button type="submit">搜索</button></form>',
        base=BASE,
        key=row.session_key,
        q=search.text,
        modes=modes,
        start=start_text,
        end=end_text,
    )
    query = {
        "key": row.session_key,
        "q": search.text,
        "mode": mode,
        "from": start_text,
        "to": end_text,
    }
    hits = hit_count(search, found)
    body = render(
        '{summary}<div class="toolbar">{filters}{selection}</div>'
        "<h2>提炼的记忆</h2>{memories}<h2>对话</h2>{hits}{turns}{pager}",
        summary=summary,
        selection=_selection_form(page, row.session_key),
        filters=filters,
        memories=_memory_rows(page, row.session_key, memories, sources, pinned_memories),
        hits=hits,
        # An empty search result is said once, by the count.
        turns=_turn_rows(page, row.session_key, found.items, policy)
        if found.items or not hits
        else Markup(""),
        pager=pager(f"{BASE}/session", query, search.page, len(found.items)),
    )
    return layout(page, "sessions", row.name or f"QQ {row.user_id}", body)
