"""The console's pages as HTML (Chinese, one column on a phone). Every value is escaped by
``markup.render``; nothing here reads the database."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from zoneinfo import ZoneInfo

from memory_core.console import (
    AuditEntry,
    BinItem,
    DailyFigures,
    FoundTurn,
    RecallTrace,
    SessionRow,
    TurnSearch,
)
from memory_core.dashboard import band_label
from memory_core.distill.memory import CATEGORY_ZH, DistilledMemory
from memory_core.evaluation.retention import RetentionPolicy
from memory_core.models import MemoryTurn

from .charts import Series, bar_chart
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
ACTION_ZH = {"edit": "修改", "delete": "删除", "restore": "恢复", "group_switch": "群记忆开关"}
TARGET_ZH = {"turn": "对话", "distilled": "提炼记忆", "group": "群"}
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
    header = render(
        "<header><strong>记忆控制台</strong>{links}"
        '<form method="post" action="{base}/logout">{csrf}'
        '<button class="plain" type="submit">退出</button></form></header>',
        links=links,
        base=BASE,
        csrf=page.csrf_field(),
    )
    return document(
        title,
        render(
            "{header}<main><h1>{title}</h1>{messages}{body}</main>",
            header=header,
            title=title,
            messages=messages,
            body=body,
        ),
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
    from urllib.parse import urlencode

    return f"{BASE}/session?{urlencode({'key': key})}"


def _who(row: SessionRow) -> Markup:
    name = row.name or "（无昵称）"
    where = f"群 {row.group_id}" if row.group_id is not None else "私聊"
    return render(
        '<a href="{href}">{name}</a> <span class="muted">QQ {user} · {where}</span>',
        href=session_link(row.session_key),
        name=name,
        user=row.user_id,
        where=where,
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
            '<tr class="session"><td data-label="会话">{who}</td>'
            '<td data-label="类型">{kind}</td><td data-label="对话">{turns}</td>'
            '<td data-label="记忆">{memories}</td><td data-label="最近">{last}</td></tr>',
            who=_who(r),
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
            pager=_pager(f"{BASE}/sessions", query, number, len(rows)),
        ),
    )


def _pager(path: str, query: dict[str, str], number: int, shown: int) -> Markup:
    from urllib.parse import urlencode

    from memory_core.console.service import PAGE_SIZE

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


def _band(turn: MemoryTurn, policy: RetentionPolicy | None) -> str:
    if turn.score is None:
        return "未评分"
    if policy is None:
        return str(turn.score)
    return f"{turn.score} · {band_label(policy.band_for(turn.score).name)}"


def _expiry(page: Page, turn: MemoryTurn) -> str:
    return "不过期" if turn.expires_at is None else page.when(turn.expires_at)


def _speaker(turn: MemoryTurn) -> str:
    if turn.role == "assistant":
        return "机器人"
    return turn.sender_name or f"QQ {turn.user_id}"


def _delete_form(page: Page, kind: str, key: str, item_id: int) -> Markup:
    return render(
        '<form method="post" action="{base}/delete">{csrf}'
        '<input type="hidden" name="kind" value="{kind}">'
        '<input type="hidden" name="key" value="{key}">'
        '<input type="hidden" name="id" value="{id}">'
        '<button class="danger" type="submit">删除</button></form>',
        base=BASE,
        csrf=page.csrf_field(),
        kind=kind,
        key=key,
        id=item_id,
    )


def _edit_form(page: Page, action: str, key: str, item_id: int, text: str) -> Markup:
    return render(
        "<details><summary>修改</summary>"
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
                '<tr class="turn" id="turn-{id}">'
                '<td data-label="时间">{when}<div class="muted">#{id}{sim}</div></td>'
                '<td data-label="说话人">{who}</td><td data-label="评分">{band}</td>'
                '<td data-label="过期">{expiry}</td><td class="text" data-label="内容">{text}</td>'
                '<td><div class="row-actions">{edit}{delete}</div></td></tr>',
                id=t.id,
                when=page.when(t.created_at),
                sim=similarity,
                who=_speaker(t),
                band=_band(t, policy),
                expiry=_expiry(page, t),
                text=t.content,
                edit=_edit_form(page, "turn/edit", key, t.id, t.content),
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
    page: Page, key: str, memories: Sequence[DistilledMemory], sources: dict[int, list[MemoryTurn]]
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
                who=_speaker(t),
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
                '<tr class="memory" id="memory-{id}">'
                '<td data-label="类型">{kind} {state}<div class="muted">{category}</div></td>'
                '<td class="text" data-label="内容">{text}</td>'
                '<td data-label="时间">首次 {first}<br>确认 {last}<div class="muted">提到 {times} '
                "次 · 重要度 "
                "{importance}</div></td>"
                '<td data-label="来源">{sources}</td>'
                '<td><div class="row-actions">{edit}{delete}</div></td></tr>',
                id=m.id,
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


def session_page(
    page: Page,
    row: SessionRow,
    search: TurnSearch,
    *,
    start_text: str,
    end_text: str,
    found: Sequence[FoundTurn],
    memories: Sequence[DistilledMemory],
    sources: dict[int, list[MemoryTurn]],
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
    summary = render(
        "<p>{who}<br>"
        '<span class="muted">会话 {key} · 对话 {turns} 条 · 当前记忆 {memories} 条 · 最近 '
        "{last}</span></p>",
        who=_who(row),
        key=row.session_key,
        turns=row.turns,
        memories=row.memories,
        last=page.when(row.last_at),
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
    debug_href = f"{BASE}/debug?" + _urlencode({"user": row.user_id, "group": row.group_id or ""})
    body = render(
        "{summary}<p>"
        '<a href="{debug}">在回忆调试中以此会话提问</a> · <a href="{bin}">此会话的回收站</a></p>'
        "{filters}<h2>提炼的记忆</h2>{memories}<h2>对话</h2>{turns}{pager}",
        summary=summary,
        debug=debug_href,
        bin=f"{BASE}/bin?" + _urlencode({"key": row.session_key}),
        filters=filters,
        memories=_memory_rows(page, row.session_key, memories, sources),
        turns=_turn_rows(page, row.session_key, found, policy),
        pager=_pager(f"{BASE}/session", query, search.page, len(found)),
    )
    return layout(page, "sessions", row.name or f"会话 {row.session_key}", body)


def _urlencode(values: dict[str, object]) -> str:
    from urllib.parse import urlencode

    return urlencode({k: "" if v is None else str(v) for k, v in values.items()})


def bin_page(page: Page, items: Sequence[BinItem], session_key: str) -> Markup:
    rows = join(
        render(
            '<tr class="binned"><td data-label="类型">{kind}</td>'
            '<td class="text" data-label="内容">{summary}</td>'
            '<td data-label="会话"><a href="{href}">{key}</a></td>'
            '<td data-label="删除">{when}<div class="muted">{who}</div></td>'
            '<td data-label="保留到">{until}</td>'
            '<td><form method="post" action="{base}/bin/restore">{csrf}'
            '<input type="hidden" name="id" value="{id}"><button type="submit">恢复</button></form>'
            "</td></tr>",
            kind=TARGET_ZH.get(b.kind, b.kind),
            summary=b.summary,
            href=session_link(b.session_key),
            key=b.session_key,
            when=page.when(b.deleted_at),
            who=b.deleted_by,
            until=page.when(b.purge_after),
            base=BASE,
            csrf=page.csrf_field(),
            id=b.id,
        )
        for b in items
    )
    scope = (
        render(
            '<p class="muted">只看会话 {key}。<a href="{base}/bin">看全部</a></p>',
            key=session_key,
            base=BASE,
        )
        if session_key
        else Markup("")
    )
    table = (
        render(
            '<table class="stack"><thead><tr><th>类型</th><th>内容</th><th>会话</th>'
            "<th>删除时间</th>"
            "<th>保留到</th><th></th></tr></thead><tbody>{rows}</tbody></table>",
            rows=rows,
        )
        if items
        else Markup('<p class="muted">回收站是空的。</p>')
    )
    return layout(page, "bin", "回收站", render("{scope}{table}", scope=scope, table=table))


def audit_page(page: Page, entries: Sequence[AuditEntry], number: int) -> Markup:
    rows = join(
        render(
            '<tr class="audit"><td data-label="时间">{when}</td>'
            '<td data-label="操作人">{actor}</td>'
            '<td data-label="操作">{action} {target} #{id}</td><td data-label="会话">{key}</td>'
            '<td class="text" data-label="之前">{before}</td>'
            '<td class="text" data-label="之后">{after}</td></tr>',
            when=page.when(e.at),
            actor=e.actor,
            action=ACTION_ZH.get(e.action, e.action),
            target=TARGET_ZH.get(e.target_kind, e.target_kind),
            id=e.target_id if e.target_id is not None else "",
            key=e.session_key or "",
            before=e.before_text or "",
            after=e.after_text or "",
        )
        for e in entries
    )
    table = (
        render(
            '<table class="stack"><thead><tr><th>时间</th><th>操作人</th><th>操作</th><th>会话</th>'
            "<th>之前</th><th>之后</th></tr></thead><tbody>{rows}</tbody></table>",
            rows=rows,
        )
        if entries
        else Markup('<p class="muted">还没有任何修改。</p>')
    )
    return layout(
        page,
        "audit",
        "审计日志",
        render("{t}{p}", t=table, p=_pager(f"{BASE}/audit", {}, number, len(entries))),
    )


def overview_page(
    page: Page, figures: DailyFigures, band_names: Sequence[str], bin_size: int
) -> Markup:
    labels = [f"{d:%m-%d}" for d in figures.days]
    m = figures.metrics

    def metric(name: str) -> tuple[int, ...]:
        return m.get(name, tuple(0 for _ in figures.days))

    charts = [
        bar_chart(
            "每天的消息（已存储的对话）",
            labels,
            [Series("用户", figures.user_turns), Series("机器人", figures.bot_turns)],
        ),
        bar_chart(
            "每天的评估结果（保留时长）",
            labels,
            [Series(band_label(n), metric(f"band_{n}")) for n in band_names]
            or [Series("无", metric("evaluation_ok"))],
        ),
        bar_chart("每天清理的过期记忆", labels, [Series("清理", metric("purged"))]),
        bar_chart(
            "每天的提炼",
            labels,
            [Series("成功", metric("extraction_ok")), Series("失败", metric("extraction_failed"))],
        ),
        bar_chart(
            "每天的回答缓存",
            labels,
            [
                Series(
                    "命中",
                    tuple(
                        a + b + c
                        for a, b, c in zip(
                            metric("cache_hit_user_exact"),
                            metric("cache_hit_public_exact"),
                            metric("cache_hit_semantic"),
                            strict=True,
                        )
                    ),
                ),
                Series("未命中", metric("cache_miss")),
            ],
        ),
    ]
    body = render(
        '<p class="muted">近 {days} 天（{tz}）· 回收站 {bin} 条</p>'
        '<div class="cards">{charts}</div>',
        days=len(figures.days),
        tz=page.tz.key,
        bin=bin_size,
        charts=join(charts),
    )
    return layout(page, "overview", "概览", body)


def debug_page(
    page: Page, *, user: str, group: str, message: str, at: str, trace: RecallTrace | None
) -> Markup:
    form = render(
        '<form class="filters" method="post" action="{base}/debug">{csrf}'
        '<label>QQ 号<input name="user" value="{user}" inputmode="numeric" required size="12">'
        "</label>"
        '<label>群号（私聊留空）<input name="group" value="{group}" inputmode="numeric" '
        'size="12"></label>'
        '<label>时间<input type="datetime-local" name="at" value="{at}"></label>'
        '<label class="wide">消息<input name="message" value="{message}" required></label>'
        '<button type="submit">看看会想起什么</button></form>',
        base=BASE,
        csrf=page.csrf_field(),
        user=user,
        group=group,
        at=at,
        message=message,
    )
    if trace is None:
        return layout(page, "debug", "回忆调试", form)
    rows = join(
        render(
            '<tr class="candidate"><td data-label="排名">{rank}</td>'
            '<td class="text" data-label="内容">{when} {who}：{text}</td>'
            '<td data-label="向量">{sim}</td><td data-label="关键词">{hits}</td>'
            '<td data-label="时间衰减">{decay}</td>'
            '<td data-label="融合得分">{fused}</td><td data-label="结果">{fate}</td></tr>',
            rank=c.rank,
            when=page.when(c.turn.created_at) if c.turn else "",
            who=_speaker(c.turn) if c.turn else "",
            text=c.turn.content if c.turn else "（已不在）",
            sim=f"{c.similarity:.3f}",
            hits="、".join(c.keyword_hits) or "—",
            decay=f"{c.decay:.3f}",
            fused=f"{c.fused:.4f}",
            fate=c.fate,
        )
        for c in trace.candidates
    )
    candidates = (
        render(
            '<table class="stack"><thead><tr><th>#</th><th>候选</th><th>向量</th><th>关键词</th>'
            "<th>衰减</th><th>融合</th><th>结果</th></tr></thead><tbody>{rows}</tbody></table>",
            rows=rows,
        )
        if trace.candidates
        else Markup('<p class="muted">没有候选：这个会话里找不到相关的对话。</p>')
    )
    prompt = join(
        render(
            '<h3>{role}</h3><pre class="prompt">{content}</pre>',
            role=m["role"],
            content=m["content"],
        )
        for m in trace.messages
    )
    ctx = trace.context
    body = render(
        '{form}<p class="muted">会话 {key} · 搜索文本「{search}」{range} · 记忆 {tokens}/{budget} '
        "tokens · "
        "提炼记忆 {distilled} 条 · 回忆对话 {turns} 条 · 因预算舍弃 {dropped} 项 · 近期对话 "
        "{recent} 条</p>"
        "<h2>候选</h2>{candidates}<h2>最终提示词</h2>{prompt}",
        form=form,
        key=trace.session_key,
        search=trace.search_text,
        range=f" · 时间「{trace.time_range}」" if trace.time_range else "",
        tokens=ctx.tokens,
        budget=trace.budget,
        distilled=len(ctx.distilled_ids),
        turns=len(ctx.turn_ids),
        dropped=ctx.dropped,
        recent=len(trace.recent),
        candidates=candidates,
        prompt=prompt,
    )
    return layout(page, "debug", "回忆调试", body)


def settings_page(
    page: Page, rows: Sequence[tuple[str, str]], groups: Sequence[tuple[int, bool]]
) -> Markup:
    table = join(
        render(
            '<tr class="setting"><td data-label="键"><code>{k}</code></td>'
            '<td class="text" data-label="值">{v}</td></tr>',
            k=k,
            v=v,
        )
        for k, v in rows
    )
    switches = join(
        render(
            '<tr><td data-label="群">{g}</td><td data-label="记忆">{state}</td><td>'
            '<form method="post" action="{base}/group-switch">{csrf}<input type="hidden" '
            'name="group" value="{g}">'
            '<input type="hidden" name="on" value="{next}">'
            '<button type="submit" class="plain">{label}</button></form></td></tr>',
            g=g,
            state="开" if on else "关",
            base=BASE,
            csrf=page.csrf_field(),
            next="1" if not on else "0",
            label="打开记忆" if not on else "关闭记忆",
        )
        for g, on in groups
    )
    group_form = render(
        '<form class="filters" method="post" action="{base}/group-switch">{csrf}'
        '<label>群号<input name="group" inputmode="numeric" required size="12"></label>'
        '<label>记忆<select name="on"><option value="0">关闭</option>'
        '<option value="1">打开</option>'
        "</select></label>"
        '<button type="submit">设置</button></form>',
        base=BASE,
        csrf=page.csrf_field(),
    )
    body = render(
        '<h2>各群记忆开关</h2>{form}<table class="stack"><tbody>{switches}</tbody></table>'
        "<h2>生效的配置</h2>"
        '<p class="muted">密钥只显示是否已设置。修改请编辑 .env.prod 并重启。</p>'
        '<table class="stack"><thead><tr><th>键</th><th>值</th></tr></thead><tbody>{table}</tbody>'
        "</table>",
        form=group_form,
        switches=switches,
        table=table,
    )
    return layout(page, "settings", "设置", body)
