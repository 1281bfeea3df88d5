"""Charts as inline SVG, drawn on the server: no script, nothing fetched by the browser.

Each chart is a ``<figure>`` with a title, bars scaled to the largest value, a few axis labels
and a ``<title>`` per bar (the exact figure on hover or long press).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .markup import Markup, join, render

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 12, 28
COLOURS = ("#3b82f6", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#64748b")


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float]


def _nice_top(value: float) -> float:
    """The axis maximum: 1, 2 or 5 times a power of ten, at least ``value``."""
    if value <= 0:
        return 1.0
    step = 1.0
    while step * 10 <= value:
        step *= 10
    for factor in (1, 2, 5, 10):
        if factor * step >= value:
            return factor * step
    return 10 * step


def _number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"


def bar_chart(
    title: str, labels: Sequence[str], series: Sequence[Series], *, stacked: bool = True
) -> Markup:
    """Bars per label, the series stacked (or side by side), with a legend."""
    count = max(len(labels), 1)
    totals = [
        sum(s.values[i] for s in series)
        if stacked
        else max((s.values[i] for s in series), default=0)
        for i in range(len(labels))
    ]
    top = _nice_top(max(totals, default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / count
    bar_w = max(slot * 0.7 / (1 if stacked else max(len(series), 1)), 1.0)
    shapes: list[Markup] = []
    for fraction in (0, 0.5, 1):
        y = TOP + plot_h * (1 - fraction)
        shapes.append(
            render(
                '<line x1="{x1}" x2="{x2}" y1="{y}" y2="{y}" class="grid"/>'
                '<text x="{tx}" y="{ty}" class="axis" text-anchor="end">{value}</text>',
                x1=LEFT,
                x2=WIDTH - RIGHT,
                y=f"{y:.1f}",
                tx=LEFT - 4,
                ty=f"{y + 4:.1f}",
                value=_number(top * fraction),
            )
        )
    for i, label in enumerate(labels):
        base = float(TOP + plot_h)
        x0 = LEFT + slot * i + slot * 0.15
        for k, s in enumerate(series):
            value = s.values[i]
            height = plot_h * value / top
            x = x0 if stacked else x0 + bar_w * k
            y = base - height
            if value:
                shapes.append(
                    render(
                        '<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="{fill}" class="bar">'
                        "<title>{label} {name}：{value}</title></rect>",
                        x=f"{x:.1f}",
                        y=f"{y:.1f}",
                        w=f"{bar_w:.1f}",
                        h=f"{height:.1f}",
                        fill=COLOURS[k % len(COLOURS)],
                        label=label,
                        name=s.name,
                        value=_number(value),
                    )
                )
            if stacked:
                base = y
        every = max(1, count // 8)  # at most about eight labels under the axis
        if i % every == 0 or i == count - 1:
            shapes.append(
                render(
                    '<text x="{x}" y="{y}" class="axis" text-anchor="middle">{label}</text>',
                    x=f"{LEFT + slot * (i + 0.5):.1f}",
                    y=HEIGHT - 8,
                    label=label,
                )
            )
    legend = join(
        render(
            '<span class="key"><i class="c{k}"></i>{name}</span>',
            k=k % len(COLOURS),
            name=s.name,
        )
        for k, s in enumerate(series)
    )
    return render(
        '<figure class="chart"><figcaption>{title}</figcaption>'
        '<svg viewBox="0 0 {w} {h}" role="img" aria-label="{title}" '
        'preserveAspectRatio="xMidYMid meet">{shapes}</svg>'
        '<div class="legend">{legend}</div></figure>',
        title=title,
        w=WIDTH,
        h=HEIGHT,
        shapes=join(shapes),
        legend=legend,
    )
