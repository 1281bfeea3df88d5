"""Charts as inline SVG, drawn on the server: no script, nothing fetched by the browser.

Each chart is a ``<figure>`` with a title, bars scaled to a round axis, a legend and a
``<title>`` per bar (the exact figure on hover or long press).

The SVG has no ``viewBox``: horizontal positions are percentages of its width and vertical ones
pixels of its fixed height, so the chart stretches to its card while its text stays at the CSS
size (12 px). A ``viewBox`` scales text with the card: 11 px in a 640-unit box became about 6 px
in a phone's 350 px card. The values are counts, so the axis only ever shows whole numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .markup import Markup, join, render

HEIGHT = 220
EMPTY_HEIGHT = 72  # an empty chart: one line of text, no axis
TOP, BOTTOM = 16, 28  # pixels above the plot (the top label) and below it (the day labels)
LEFT, RIGHT = 12.0, 2.0  # percent of the width: the axis numbers, a margin
MAX_INTERVALS = 4  # at most this many steps up the axis (five grid lines)
MAX_DAY_LABELS = 7  # labels under the axis: seven "12-01" fit a phone's card
MAX_VALUE_LABELS = 14  # bars that get their total written above them
EMPTY = "暂无数据"
COLOURS = ("#3b82f6", "#f59e0b", "#10b981", "#ef4444", "#8b5cf6", "#64748b")


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[int]


def count_ticks(largest: float) -> list[int]:
    """The axis ticks for counts up to ``largest``: 0 and whole steps of 1, 2 or 5 times a
    power of ten, at most ``MAX_INTERVALS`` of them, the last at or above ``largest``."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            size = factor * step
            intervals = max(-(-int(largest) // size), 1)  # ceiling, at least one step
            if intervals <= MAX_INTERVALS:
                return [size * i for i in range(intervals + 1)]
        step *= 10


def _x(percent: float) -> str:
    return f"{percent:.2f}%"


def _day_labels(count: int) -> set[int]:
    """Which of ``count`` days get a label: evenly spaced, counted back from the last (today
    is always named)."""
    every = max(1, -(-count // MAX_DAY_LABELS))
    return {i for i in range(count) if (count - 1 - i) % every == 0}


def bar_chart(
    title: str, labels: Sequence[str], series: Sequence[Series], *, stacked: bool = True
) -> Markup:
    """Bars per label, the series stacked (or side by side), with a legend; an empty chart
    (nothing above zero) keeps its frame and says ``暂无数据``."""
    count = max(len(labels), 1)
    totals = [
        sum(s.values[i] for s in series)
        if stacked
        else max((s.values[i] for s in series), default=0)
        for i in range(len(labels))
    ]
    ticks = count_ticks(max(totals, default=0))
    top = ticks[-1]
    plot_h = HEIGHT - TOP - BOTTOM
    slot = (100.0 - LEFT - RIGHT) / count
    bar_w = slot * 0.7 / (1 if stacked else max(len(series), 1))
    if not any(totals):
        return _empty_chart(title, series)
    shapes: list[Markup] = []
    for value in ticks:
        y = TOP + plot_h * (1 - value / top)
        shapes.append(
            render(
                '<line x1="{x1}" x2="{x2}" y1="{y}" y2="{y}" class="grid"/>'
                '<text x="{tx}" y="{ty}" class="axis tick" text-anchor="end">{value}</text>',
                x1=_x(LEFT),
                x2=_x(100 - RIGHT),
                y=f"{y:.1f}",
                tx=_x(LEFT - 1.5),
                ty=f"{y + 4:.1f}",
                value=value,
            )
        )
    named = _day_labels(len(labels))
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
                        x=_x(x),
                        y=f"{y:.1f}",
                        w=_x(bar_w),
                        h=f"{height:.1f}",
                        fill=COLOURS[k % len(COLOURS)],
                        label=label,
                        name=s.name,
                        value=value,
                    )
                )
            if stacked:
                base = y
        centre = _x(LEFT + slot * (i + 0.5))
        if totals[i] and stacked and count <= MAX_VALUE_LABELS:
            shapes.append(
                render(
                    '<text x="{x}" y="{y}" class="value" text-anchor="middle">{total}</text>',
                    x=centre,
                    y=f"{TOP + plot_h * (1 - totals[i] / top) - 3:.1f}",
                    total=totals[i],
                )
            )
        if i in named:
            shapes.append(
                render(
                    '<text x="{x}" y="{y}" class="axis day" text-anchor="middle">{label}</text>',
                    x=centre,
                    y=HEIGHT - 9,
                    label=label,
                )
            )
    return _figure(title, title, HEIGHT, join(shapes), series)


def _empty_chart(title: str, series: Sequence[Series]) -> Markup:
    """A chart with nothing above zero: a short frame saying so, the legend kept (what would
    be counted)."""
    text = render(
        '<text x="50%" y="{y}" class="empty" text-anchor="middle">{text}</text>',
        y=EMPTY_HEIGHT // 2 + 5,
        text=EMPTY,
    )
    return _figure(title, f"{title}：{EMPTY}", EMPTY_HEIGHT, text, series, css=" empty")


def _figure(
    title: str, label: str, height: int, shapes: Markup, series: Sequence[Series], css: str = ""
) -> Markup:
    legend = join(
        render(
            '<span class="key"><i class="c{k}"></i>{name}</span>',
            k=k % len(COLOURS),
            name=s.name,
        )
        for k, s in enumerate(series)
    )
    return render(
        '<figure class="chart{css}"><figcaption>{title}</figcaption>'
        '<svg width="100%" height="{h}" role="img" aria-label="{label}">{shapes}</svg>'
        '<div class="legend">{legend}</div></figure>',
        css=css,
        title=title,
        label=label,
        h=height,
        shapes=shapes,
        legend=legend,
    )
