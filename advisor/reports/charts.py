"""Chart geometry for the HTML report: hand-written inline SVG, computed here, drawn by the template.

Why not a chart library: the report must be one offline file of a few hundred KB. The smallest
inlinable libraries (uPlot ~50 KB, Chart.js ~200 KB, Plotly ~3 MB) would be most of the page,
need JavaScript to show anything (so nothing prints or shows with JS off), and still need the data
embedded as JSON. Our charts are three simple shapes (a stacked bar, stacked bars per step, a few
line panels on one time axis); as SVG they cost a few KB, print sharply, follow the light/dark CSS
variables, and carry native tooltips (`<title>`). All numbers are placed here; the template only
loops over shapes, so every label still goes through jinja's autoescape.
"""

from __future__ import annotations

import math
from typing import Callable
from dataclasses import dataclass, field

from advisor.reports import format as fmt
from advisor import units
from advisor.report_blocks import Step

WIDTH = 960  # viewBox width of every chart; the SVG scales to the page
LEFT, RIGHT = 64, 12  # room for y labels on the left
MAX_BUCKETS = 400  # timeline: at most 2 points (min, max) per bucket per series
MAX_STEP_BARS = 240  # step chart: beyond this, every k-th step is drawn
MAX_STEP_BANDS = 240  # timeline: beyond this many measured steps, one band for the window


@dataclass
class Rect:
    """A rectangle in chart coordinates with a CSS class and a tooltip."""

    x: float
    y: float
    w: float
    h: float
    cls: str
    tip: str = ""


@dataclass
class Tick:
    """An axis tick: position along the axis (chart units) and its label."""

    pos: float
    label: str


@dataclass
class StepChart:
    """Stacked bars, one per measured step: data wait, the rest of the step, optimizer."""

    width: int
    height: int
    plot_top: float
    plot_bottom: float
    bars: list[Rect]
    y_ticks: list[Tick]  # pos is the gridline's y
    x_ticks: list[Tick]  # pos is the label's x
    note: str = ""
    plot_left: float = LEFT
    plot_right: float = WIDTH - RIGHT
    label_x: float = LEFT - 6  # right edge of the y labels
    x_label_y: float = 0.0


@dataclass
class Panel:
    """One series of the utilization timeline, drawn at vertical offset `y0`."""

    title: str
    summary: str
    cls: str
    y0: float
    height: float
    line: str  # polyline points "x,y x,y ..."
    area: str  # polygon points: the line closed down to the baseline
    top_label: str
    bottom_label: str
    y_base: float = 0.0  # y0 + height: the panel's baseline
    title_y: float = 0.0  # where the title sits, above the panel
    top_label_y: float = 0.0


@dataclass
class Timeline:
    """Sampler series on one time axis, with the measured steps shaded behind each panel."""

    width: int
    height: int
    panels: list[Panel]
    bands: list[Rect]  # x and w only; drawn in every panel
    x_ticks: list[Tick]
    axis_y: float  # baseline of the time labels
    plot_left: float = LEFT
    plot_right: float = WIDTH - RIGHT
    label_x: float = LEFT - 6
    legend: list[tuple[str, str]] = field(default_factory=list)  # (css class, label)


# --- helpers ---------------------------------------------------------------------------


def nice_max(x: float) -> float:
    """The smallest 1, 2, 2.5, 5 x 10^k at or above `x` (axis tops that read well)."""
    if units.finite(x) is None or x <= 0:
        return 1.0
    base = 10 ** math.floor(math.log10(x))
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * base >= x * (1 - 1e-9):
            return m * base
    return 10 * base


def nice_bytes_max(x: float) -> float:
    """`nice_max` in the binary unit the value is printed in (so an axis top reads 1.5 GiB, not 1.86 GiB)."""
    if units.finite(x) is None or x <= 0:
        return 1.0
    unit = next((u for u in (2**30, 2**20, 2**10) if x >= u), 1)
    return nice_max(x / unit) * unit


def nice_step(span: float, target: int = 8) -> float:
    raw = span / max(target, 1)
    if raw <= 0:
        return 1.0
    base = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * base >= raw:
            return m * base
    return 10 * base


def _tidy(label: str) -> str:
    """Axis labels without trailing zeros: 400 MiB, 1.5 GiB."""
    return label.replace(".00 ", " ").replace(".0 ", " ")


def _r(x: float) -> float:
    return round(x, 1)


# --- step chart --------------------------------------------------------------------------


def step_chart(steps: list[Step]) -> StepChart | None:
    """Bars for each measured step (data wait at the bottom, optimizer on top); profiled steps are marked."""
    rows = [s for s in steps if s.duration_s is not None and units.finite(s.duration_s) is not None and s.duration_s >= 0]
    if not rows:
        return None
    note = ""
    if len(rows) > MAX_STEP_BARS:
        k = math.ceil(len(rows) / MAX_STEP_BARS)
        rows = rows[::k]
        note = f"every {k}th step shown ({len(steps)} measured)"
    height, top, bottom = 210, 12, 180
    plot_h = bottom - top
    y_max = nice_max(max(float(r.duration_s or 0.0) for r in rows))
    slot = (WIDTH - LEFT - RIGHT) / len(rows)
    bar_w = max(1.0, slot * 0.72)
    bars: list[Rect] = []
    for i, r in enumerate(rows):
        dur = float(r.duration_s or 0.0)
        data = min(dur, max(0.0, units.finite(r.data_wait_s) or 0.0))
        opt = min(dur - data, max(0.0, units.finite(r.optimizer_s) or 0.0))
        rest = max(0.0, dur - data - opt)
        x = LEFT + i * slot + (slot - bar_w) / 2
        prof = " profiled" if r.profiled else ""
        tip = (f"step {i if r.index is None else r.index}{' (under the profiler)' if prof else ''}: {units.time_s(dur)}; "
               f"data wait {units.time_s(data)}, forward/backward {units.time_s(rest)}, optimizer {units.time_s(opt)}")
        y = float(bottom)
        for part, cls in ((data, "data"), (rest, "compute"), (opt, "optimizer")):
            h = plot_h * part / y_max
            if h > 0:
                y -= h
                bars.append(Rect(_r(x), _r(y), _r(bar_w), _r(h), cls + prof, tip))
    y_ticks = [Tick(_r(bottom - plot_h * f), fmt.tick_time(y_max * f) if f else "0") for f in (0, 0.5, 1)]
    every = max(1, math.ceil(len(rows) / 20))
    x_ticks = [Tick(_r(LEFT + i * slot + slot / 2), str(i if r.index is None else r.index)) for i, r in enumerate(rows) if i % every == 0]
    return StepChart(WIDTH, height, top, bottom, bars, y_ticks, x_ticks, note, x_label_y=bottom + 16)


# --- utilization timeline ----------------------------------------------------------------


@dataclass
class Series:
    """A sampler column to draw: its title, CSS class, formatter, and a fixed top when it has one."""

    column: str
    title: str
    cls: str
    fmt: Callable[[float], str]
    top: float | None = None
    nice: Callable[[float], float] = nice_max  # rounds the data's max up to the axis top


def decimate(ts: list[float], ys: list[float], buckets: int = MAX_BUCKETS) -> list[tuple[float, float]]:
    """Keep the shape of a long series: the min and max of each time bucket, in time order."""
    pts = [(t, y) for t, y in zip(ts, ys) if units.finite(t) is not None and units.finite(y) is not None]
    if len(pts) <= 2 * buckets:
        return pts
    t0, t1 = pts[0][0], pts[-1][0]
    width = (t1 - t0) / buckets or 1.0
    out: list[tuple[float, float]] = []
    group: list[tuple[float, float]] = []
    current = 0
    for p in pts:
        b = min(buckets - 1, int((p[0] - t0) / width))
        if b != current and group:
            out.extend(_minmax(group))
            group = []
        current = b
        group.append(p)
    out.extend(_minmax(group))
    return out


def _minmax(group: list[tuple[float, float]]) -> list[tuple[float, float]]:
    lo = min(group, key=lambda p: p[1])
    hi = max(group, key=lambda p: p[1])
    return sorted({lo, hi}, key=lambda p: p[0])


def timeline(samples: dict[str, list[float]], series: list[Series],
             step_spans: list[tuple[float, float, bool]]) -> Timeline | None:
    """Panels for each series with data, on one time axis starting at the first sample.

    `samples` maps column name to values (with a `t` column, seconds on the monotonic clock);
    `step_spans` are the measured steps as (t_start, t_end, profiled) on the same clock.
    """
    ts = samples.get("t") or []
    finite_t = [t for t in ts if units.finite(t) is not None]
    if len(finite_t) < 2:
        return None
    t0 = min(finite_t + [s[0] for s in step_spans if units.finite(s[0]) is not None])
    t1 = max(finite_t + [s[1] for s in step_spans if units.finite(s[1]) is not None])
    span = max(t1 - t0, 1e-6)
    plot_w = WIDTH - LEFT - RIGHT

    def X(t: float) -> float:
        return _r(LEFT + plot_w * (t - t0) / span)

    spans = [s for s in step_spans if units.finite(s[0]) is not None and units.finite(s[1]) is not None and s[1] >= s[0]]
    window = (spans[0][0], spans[-1][1]) if spans else None
    panel_h, gap, y = 64.0, 26.0, 18.0
    panels: list[Panel] = []
    for s in series:
        ys = samples.get(s.column)
        if not ys or not any(units.finite(v) is not None for v in ys):
            continue
        pts = decimate(ts, ys)
        if not pts:
            continue
        vals = [v for _, v in pts]
        top = s.top if s.top is not None else s.nice(max(vals))
        top = max(top, max(vals))
        # the summary is over the measured steps (as report.json's `utilization`), else over all
        inside = [v for t, v in zip(ts, ys) if units.finite(v) is not None and window and window[0] <= t <= window[1]]
        stat = inside or [v for v in ys if units.finite(v) is not None]
        where = "measured steps: " if inside else ""
        base = y + panel_h
        coords = [(X(t), _r(base - panel_h * max(0.0, v) / (top or 1))) for t, v in pts]
        line = " ".join(f"{a},{b}" for a, b in coords)
        area = f"{coords[0][0]},{_r(base)} {line} {coords[-1][0]},{_r(base)}"
        panels.append(Panel(
            title=s.title, summary=f"{where}mean {s.fmt(sum(stat) / len(stat))} · max {s.fmt(max(stat))}", cls=s.cls,
            y0=_r(y), height=panel_h, line=line, area=area, top_label=_tidy(s.fmt(top)), bottom_label="0",
            y_base=_r(base), title_y=_r(y - 5), top_label_y=_r(y + 9),
        ))
        y += panel_h + gap
    if not panels:
        return None
    bands: list[Rect] = []
    legend = []
    if spans:
        if len(spans) > MAX_STEP_BANDS:
            lo, hi = spans[0][0], spans[-1][1]
            bands.append(Rect(X(lo), 0, _r(max(0.5, X(hi) - X(lo))), 0, "band-a", f"{len(spans)} measured steps, {units.time_s(lo - t0)} to {units.time_s(hi - t0)}"))
            legend.append(("band-a", "measured steps"))
        else:
            for i, (a, b, prof) in enumerate(spans):
                cls = "band-p" if prof else ("band-a" if i % 2 == 0 else "band-b")
                tip = f"measured step {i}{' (profiled)' if prof else ''}: {units.time_s(a - t0)} to {units.time_s(b - t0)} ({units.time_s(b - a)})"
                bands.append(Rect(X(a), 0, _r(max(0.5, X(b) - X(a))), 0, cls, tip))
            legend.append(("band-a", "measured steps (alternating shades)"))
            if any(p for *_, p in spans):
                legend.append(("band-p", "steps under the profiler"))
    step = nice_step(span, 10)
    x_ticks = [Tick(X(t0 + k * step), f"{k * step:g} s") for k in range(int(span / step) + 1)]
    axis_y = _r(y - gap + 16)
    return Timeline(WIDTH, int(axis_y + 8), panels, bands, x_ticks, axis_y, legend=legend)
