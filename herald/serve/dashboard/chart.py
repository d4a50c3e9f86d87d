"""Sends over time as an SVG bar chart, computed here and drawn by a template (no JS library).

Only numbers and text the template escapes reach the SVG: bar geometry is computed from counts,
labels are formatted times and numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from herald.serve.dashboard.reads import Buckets

WIDTH, HEIGHT = 720, 220
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 12, 28


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    title: str  # hover text: when and how many


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    bars: list[Bar]
    peak: int  # the y axis' top value
    unit: str  # minute | hour | day
    first_label: str
    last_label: str
    total: int
    plot_left: int = LEFT
    plot_right: int = WIDTH - RIGHT
    plot_top: int = TOP
    plot_bottom: int = HEIGHT - BOTTOM


def _unit(width: timedelta) -> tuple[str, str]:
    if width <= timedelta(minutes=1):
        return "minute", "%Y-%m-%d %H:%M"
    if width <= timedelta(hours=1):
        return "hour", "%Y-%m-%d %H:00"
    return "day", "%Y-%m-%d"


def sends_chart(buckets: Buckets) -> Chart:
    unit, pattern = _unit(buckets.width)
    peak = max(max(buckets.counts), 1)
    slots = len(buckets.counts)
    plot_width = WIDTH - LEFT - RIGHT
    plot_height = HEIGHT - TOP - BOTTOM
    step = plot_width / slots
    gap = min(2.0, step * 0.2)
    bars = []
    for i, n in enumerate(buckets.counts):
        if n == 0:
            continue
        height = plot_height * n / peak
        when = (buckets.start + buckets.width * i).strftime(pattern)
        bars.append(
            Bar(
                x=round(LEFT + i * step + gap / 2, 2),
                y=round(TOP + plot_height - height, 2),
                width=round(max(step - gap, 0.5), 2),
                height=round(height, 2),
                title=f"{when} UTC: {n} sent",
            )
        )
    last = buckets.start + buckets.width * (slots - 1)
    return Chart(
        WIDTH,
        HEIGHT,
        bars,
        peak,
        unit,
        buckets.start.strftime(pattern),
        last.strftime(pattern),
        sum(buckets.counts),
    )
