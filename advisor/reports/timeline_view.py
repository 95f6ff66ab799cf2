"""The utilization timeline: the sampler's series over the run, the measured steps shaded behind them.

From the Profile's frames: ``samples`` (column ``t`` and the series below) and ``steps``
(``t_start``, ``t_end``, ``profiled``), on the same monotonic clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from advisor.analysis import steptime
from advisor import units
from advisor.report import Report

from . import charts

if TYPE_CHECKING:
    from advisor.profile import Profile

SERIES = [
    charts.Series("gpu_util_percent", "GPU utilization", "gpu", units.percent, 100.0),
    charts.Series("gpu_mem_used_bytes", "GPU memory used", "gpumem", units.bytes_, nice=charts.nice_bytes_max),
    charts.Series("gpu_power_w", "GPU power", "power", units.watts),
    charts.Series("cpu_percent", "CPU (the script's processes; 100% = one core)", "cpu", units.percent),
    charts.Series("rss_bytes", "RSS (the script's processes)", "rss", units.bytes_, nice=charts.nice_bytes_max),
]
SOURCE_GPU = "NVML (GPU) and psutil (CPU, RSS), sampled every 100 ms from outside the script"
SOURCE_CPU = "psutil (CPU, RSS), sampled every 100 ms from outside the script; no NVML GPU data in this run"


def _floats(column: pd.Series) -> list[float]:
    return [float(x) for x in pd.to_numeric(column, errors="coerce")]


def sampler_columns(profile: Profile | None) -> dict[str, list[float]]:
    """The sampler's time column and the series to draw, as lists of floats (NaN where missing)."""
    samples = profile.samples if profile is not None else None
    if samples is None or samples.empty or "t" not in samples:
        return {}
    columns = {"t": _floats(samples["t"])}
    columns.update({s.column: _floats(samples[s.column]) for s in SERIES if s.column in samples})
    return columns


def step_spans(profile: Profile | None) -> list[tuple[float, float, bool]]:
    """The measured steps as (t_start, t_end, profiled), when the steps carry their times."""
    steps = profile.steps if profile is not None else None
    if steps is None or not steptime.has_spans(steps):
        return []
    return [(float(a), float(b), bool(p))
            for a, b, p in zip(steptime.starts(steps), steptime.ends(steps), steptime.profiled(steps))]


def timeline(columns: dict[str, list[float]], spans: list[tuple[float, float, bool]]) -> charts.Timeline | None:
    return charts.timeline(columns, SERIES, spans) if columns else None


def source(columns: dict[str, list[float]]) -> str:
    has_gpu = any(units.finite(v) is not None for v in columns.get("gpu_util_percent", []))
    return SOURCE_GPU if has_gpu else SOURCE_CPU


def empty(report: Report, columns: dict[str, list[float]]) -> str:
    """Why there is no timeline to draw."""
    artifacts = report.artifacts
    if columns:
        return "the sampler recorded too few points to draw"
    if not artifacts.samples_csv:
        return "no sampler data: this report was made from a trace alone" if artifacts.trace else "no sampler data in this run"
    return "the sampler recorded nothing"
