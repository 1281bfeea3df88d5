"""The operator's other pages: the overview's figures and charts, the recall debugger and the
settings (the recycle bin and the audit log: ``log_views``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from memory_core import (
    CHAT_CACHED_TOKENS,
    CHAT_PROMPT_TOKENS,
    RECALL_BANDS,
    RECALL_MS_TOTAL,
    RECALL_REPLIES,
    RECALL_SLOW,
)
from memory_core.console import (
    ChatNames,
    Connection,
    DailyFigures,
    DatabaseState,
    GroupSwitches,
    Headline,
    RecallTrace,
    SettingsSection,
    band_label,
    uptime_zh,
)

from .charts import Series, bar_chart
from .markup import Markup, join, render
from .views import BASE, KIND_ZH, Page, button_form, chat_link, layout, speaker, where


def _recall_title(total_ms: int, replies: int) -> str:
    average = f"，平均 {total_ms / replies:.0f} ms" if replies else ""
    return f"每天回复前读取记忆的耗时（回复数{average}）"


def prompt_cache_chart(
    labels: Sequence[str], prompt: Sequence[int], cached: Sequence[int]
) -> Markup:
    """The chat model's prompt tokens a day, split into what the provider served from its
    prefix cache and the rest; the title gives the share over the days shown."""
    total = sum(prompt)
    share = f"，缓存命中 {sum(cached) / total:.1%}" if total else ""
    return bar_chart(
        f"每天聊天模型提示词的词元数（服务商报告{share}）",
        labels,
        [
            Series("缓存命中", tuple(cached)),
            Series("未命中", tuple(max(p - c, 0) for p, c in zip(prompt, cached, strict=True))),
        ],
    )


@dataclass(frozen=True)
class BotStatus:
    """What only the running bot knows, for the overview's headline."""

    accounts: Sequence[str]  # the connected QQ accounts (OneBot self_id)
    connection: Connection  # the database's state and the chat model
    started_at: datetime
    now: datetime
    chat_failing: bool = False  # the chat model's endpoint failed its calls in a row


def _troubles(headline: Headline, status: BotStatus) -> list[str]:
    """What is degraded, one short line each (database, embeddings, chat model); none: all well."""
    found = []
    database = status.connection.database
    if database is not DatabaseState.CONNECTED:
        found.append(f"数据库{database.value}")
    if headline.embedder_failing:
        found.append("向量服务连续出错")
    if headline.pending_embeddings:
        found.append(f"向量待补 {headline.pending_embeddings} 条")
    if status.connection.chat_model is None:
        found.append("大模型未配置")
    elif status.chat_failing:
        found.append("大模型连续出错")
    if headline.extraction_failed_today:
        found.append(f"今天提炼失败 {headline.extraction_failed_today} 次")
    return found


def _figure(key: str, label: str, value: object, sub: str, warn: bool = False) -> Markup:
    return render(
        '<div class="figure{warn}" id="figure-{key}"><span class="label">{label}</span>'
        '<strong class="value">{value}</strong><span class="sub">{sub}</span></div>',
        warn=" warn" if warn else "",
        key=key,
        label=label,
        value=value,
        sub=sub,
    )


def headline_row(page: Page, headline: Headline, today: DailyFigures, status: BotStatus) -> Markup:
    """The row an operator reads first: what is degraded (first: on a phone the others are
    below it), today's messages, memories, sessions, connected QQ accounts and uptime
    (MaiBot's and AstrBot's dashboards lead with these)."""
    kinds = " · ".join(f"{KIND_ZH[k]} {headline.memories.get(k, 0)}" for k in KIND_ZH)
    user, bot = (today.user_turns[-1], today.bot_turns[-1]) if today.days else (0, 0)
    accounts = status.accounts
    troubles = _troubles(headline, status)
    return render(
        '<section class="headline" aria-label="概况">{figures}</section>',
        figures=join(
            [
                _figure(
                    "state",
                    "状态",
                    "正常" if not troubles else f"{len(troubles)} 项异常",
                    "、".join(troubles) or "数据库、向量、大模型都正常",
                    warn=bool(troubles),
                ),
                _figure("today", "今天的消息", headline.today_turns, f"用户 {user} · 机器人 {bot}"),
                _figure("memories", "记忆", sum(headline.memories.values()), kinds),
                _figure("sessions", "会话", headline.sessions, "私聊与群成员各算一个"),
                _figure(
                    "accounts",
                    "在线 QQ 账号",
                    len(accounts),
                    "、".join(accounts) if accounts else "没有 QQ 客户端连着",
                    warn=not accounts,
                ),
                _figure(
                    "uptime",
                    "已运行",
                    uptime_zh(status.now - status.started_at),
                    f"自 {page.when(status.started_at)}",
                ),
            ]
        ),
    )


def overview_page(
    page: Page,
    headline: Headline,
    status: BotStatus,
    figures: DailyFigures,
    band_names: Sequence[str],
    bin_size: int,
) -> Markup:
    """The headline row, then a chart per daily figure over the days that have any."""
    shown = figures.fitted()
    labels = [f"{d:%m-%d}" for d in shown.days]
    m = shown.metrics

    def metric(name: str) -> tuple[int, ...]:
        return m.get(name, tuple(0 for _ in shown.days))

    charts = [
        bar_chart(
            "每天的消息（已存储的对话）",
            labels,
            [Series("用户", shown.user_turns), Series("机器人", shown.bot_turns)],
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
        bar_chart(
            _recall_title(sum(metric(RECALL_MS_TOTAL)), sum(metric(RECALL_REPLIES))),
            labels,
            [
                Series("100 ms 内", metric(RECALL_BANDS[0][1])),
                Series("100–300 ms", metric(RECALL_BANDS[1][1])),
                Series("300 ms 以上", metric(RECALL_SLOW)),
            ],
        ),
        prompt_cache_chart(labels, metric(CHAT_PROMPT_TOKENS), metric(CHAT_CACHED_TOKENS)),
    ]
    first, last = shown.days[0], shown.days[-1]
    body = render(
        '{headline}<p class="muted range">{first} 至 {last}，共 {days} 天（{tz}）· '
        "回收站 {bin} 条</p>"
        '<div class="cards">{charts}</div>',
        headline=headline_row(page, headline, figures, status),
        first=f"{first:%Y-%m-%d}",
        last=f"{last:%Y-%m-%d}",
        days=len(shown.days),
        tz=page.tz.key,
        bin=bin_size,
        charts=join(charts),
    )
    return layout(page, "overview", "概览", body)


ROLE_ZH = {
    "system": "系统提示词",
    "user": "用户消息",
    "assistant": "机器人的回复",
    "tool": "工具结果",
}


def debug_page(
    page: Page,
    *,
    user: str,
    group: str,
    message: str,
    at: str,
    trace: RecallTrace | None,
    names: Mapping[str, ChatNames],
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
            '<tr class="candidate"><td class="meta" data-label="排名">{rank}</td>'
            '<td class="text" data-label="内容">{when} {who}：{text}</td>'
            '<td class="meta" data-label="向量">{sim}</td>'
            '<td class="meta" data-label="关键词">{hits}</td>'
            '<td class="meta" data-label="时间衰减">{decay}</td>'
            '<td class="meta" data-label="融合得分">{fused}</td>'
            '<td class="meta" data-label="重排">{rerank}</td>'
            '<td class="meta" data-label="结果">{fate}</td></tr>',
            rank=c.rank,
            when=page.when(c.turn.created_at) if c.turn else "",
            who=speaker(c.turn) if c.turn else "",
            text=c.turn.content if c.turn else "（已不在）",
            sim=f"{c.similarity:.3f}",
            hits="、".join(c.keyword_hits) or "—",
            decay=f"{c.decay:.3f}",
            fused=f"{c.fused:.4f}",
            rerank="—" if c.rerank is None else f"{c.rerank:.3f}",
            fate=c.fate,
        )
        for c in trace.candidates
    )
    candidates = (
        render(
            '<table class="stack"><thead><tr><th>排名</th><th>候选</th><th>向量</th><th>关键词</th>'
            "<th>衰减</th><th>融合</th><th>重排</th><th>结果</th></tr></thead>"
            "<tbody>{rows}</tbody></table>",
            rows=rows,
        )
        if trace.candidates
        else Markup('<p class="muted">没有候选：这个会话里找不到相关的对话。</p>')
    )
    prompt = join(
        render(
            '<h3>{role}</h3><pre class="prompt">{content}</pre>',
            role=ROLE_ZH.get(m["role"], m["role"]),
            content=m["content"],
        )
        for m in trace.messages
    )
    ctx = trace.context
    body = render(
        '{form}<p class="muted">{chat} · 搜索文本「{search}」{range} · 记忆 {tokens}/{budget} '
        "词元 · "
        "提炼记忆 {distilled} 条 · 回忆对话 {turns} 条 · 因预算舍弃 {dropped} 项 · 近期对话 "
        "{recent} 条</p>"
        "<h2>候选</h2>{candidates}<h2>最终提示词</h2>{prompt}",
        form=form,
        chat=chat_link(trace.session_key, names),
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


def _switch_button(page: Page, action: str, group_id: int, on: bool, what: str) -> Markup:
    fields = {"group": group_id, "on": "1" if on else "0"}
    return button_form(page, action, fields, ("打开" if on else "关闭") + what, "small quiet")


def _section(section: SettingsSection) -> Markup:
    rows = join(
        render(
            '<tr class="setting"><td class="key"><code>{k}</code></td>'
            '<td class="value"><code>{v}</code></td><td class="text">{d}</td></tr>',
            k=k,
            v=v,
            d=d,
        )
        for k, v, d in section.rows
    )
    return render(
        '<section class="settings"><h3>{title}</h3><table class="settings">'
        "<tbody>{rows}</tbody></table></section>",
        title=section.title,
        rows=rows,
    )


def settings_page(
    page: Page,
    sections: Sequence[SettingsSection],
    groups: Sequence[GroupSwitches],
    group_names: Mapping[int, str],
) -> Markup:
    """The groups' switches (by name), then every setting in the sections of ``.env.prod``
    with what it does."""
    switches = join(
        render(
            '<tr class="group"><td class="who nowrap">{name}</td>'
            '<td class="nowrap">记忆：<strong>{memory}</strong>{memory_button}</td>'
            '<td class="nowrap">群友共享：<strong>{shared}</strong>{shared_button}</td></tr>',
            name=render(
                '{name} <span class="muted">{number}</span>',
                name=where(group.group_id, group_names.get(group.group_id)),
                number=group.group_id if group.group_id in group_names else "",
            ),
            memory="开" if group.memory_on else "关",
            memory_button=_switch_button(
                page, "/group-switch", group.group_id, not group.memory_on, "记忆"
            ),
            shared="开" if group.shared else "关",
            shared_button=_switch_button(
                page, "/group-sharing", group.group_id, not group.shared, "共享"
            ),
        )
        for group in groups
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
        '<h2>各群的记忆</h2><table class="switches"><tbody>{switches}</tbody></table>{form}'
        '<p class="muted">群友共享：成员能想起彼此在群里说过的话（与群管理员的 /群共享 相同）。</p>'
        "<h2>生效的配置</h2>"
        '<p class="muted">密钥只显示是否已设置。修改请编辑 .env.prod 并重启。</p>{sections}',
        form=group_form,
        switches=switches,
        sections=join(_section(section) for section in sections),
    )
    return layout(page, "settings", "设置", body)
