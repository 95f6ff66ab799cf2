"""Where the time went: the ops and kernels whose time per step changed most between two traces.

A gate that says "median step +12%" leaves the user to open two traces side by side. This ranks
every CPU operator (by self time per step; total time shown beside it) and GPU kernel (by device
time per step) by its change from the base trace(s) to the candidate's, with its calls per step
and its input shapes where they differ, so a matmul that grew shows up by name and by shape.

Per step: an op's time over the trace's ``ProfilerStep#N`` spans divided by their number (the
whole trace when it has none). Several traces per side (the rounds of `advise ab`) are pooled by
the median over traces of each figure, so one round that a neighbour slowed does not name every op.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import SupportsFloat

import numpy as np
import pandas as pd

from ..report import Report
from ..run_dir import layout
from ..trace import TraceError, TraceFrames, load_trace

TOP = 10


@dataclass
class OpChange:
    kind: str  # "op" (CPU operator) or "kernel" (GPU)
    name: str
    base_us: float  # self time per step (kernels: device time per step), microseconds
    current_us: float
    base_total_us: float  # total (inclusive) time per step
    current_total_us: float
    base_calls: float  # calls per step
    current_calls: float
    base_shapes: str | None = None  # the op's most frequent input shapes, on each side where they differ
    current_shapes: str | None = None

    @property
    def delta_us(self) -> float:
        return self.current_us - self.base_us

    def to_dict(self) -> dict:
        return {**asdict(self), "delta_us": self.delta_us}


def _by_name(frame: pd.DataFrame, self_col: str, shape_col: str, trace: TraceFrames) -> pd.DataFrame | None:
    """Self and total time, calls and the most frequent shape per name, over the trace's steps."""
    if not len(frame):
        return None
    if len(trace.steps):
        frame = frame[frame["step"] >= 0]
    g = frame.groupby("name", sort=False, observed=True)
    table = g.agg(self_us=(self_col, "sum"), total_us=("dur_us", "sum"), calls=("name", "size"))
    table["shapes"] = g[shape_col].agg(_common_shape) if shape_col in frame else None
    return table


def _per_step(trace: TraceFrames) -> pd.DataFrame:
    """One row per (kind, name): per-step self/total time (us), calls, and the most frequent shapes."""
    n = len(trace.steps) or 1
    frames = [table.assign(kind=kind) for kind, table in (
        ("op", _by_name(trace.ops, "self_us", "input_dims", trace)),  # a kernel's own time is its whole time
        ("kernel", _by_name(trace.kernels, "dur_us", "grid", trace))) if table is not None]
    if not frames:
        return pd.DataFrame(columns=["kind", "name", "self_us", "total_us", "calls", "shapes"])
    out = pd.concat(frames).reset_index().rename(columns={"index": "name"})
    out["name"] = out["name"].astype(str)
    for col in ("self_us", "total_us", "calls"):
        out[col] = out[col].astype(float) / n
    return out


def _common_shape(values: pd.Series) -> str | None:
    """The most frequent non-empty shape list, as text (None when the trace recorded none)."""
    texts = [str(v) for v in values if isinstance(v, (list, tuple)) and len(v)]
    if not texts:
        return None
    vals, counts = np.unique(texts, return_counts=True)
    return str(vals[int(np.argmax(counts))])


def _pooled(traces: list[TraceFrames]) -> pd.DataFrame:
    """Per (kind, name): the median over traces of each per-step figure (absent from a trace: 0)."""
    tables = [_per_step(t) for t in traces]
    if not tables or not any(len(t) for t in tables):
        return pd.DataFrame(columns=["kind", "name", "self_us", "total_us", "calls", "shapes"])
    keys = pd.concat([t[["kind", "name"]] for t in tables]).drop_duplicates(ignore_index=True)
    aligned = [keys.merge(t, on=["kind", "name"], how="left") for t in tables]
    out = keys.copy()
    for col in ("self_us", "total_us", "calls"):
        out[col] = np.median(np.stack([t[col].astype(float).fillna(0.0).to_numpy() for t in aligned]), axis=0)
    shapes = aligned[0]["shapes"].astype(object)
    for t in aligned[1:]:
        shapes = shapes.where(shapes.notna(), t["shapes"].astype(object))
    out["shapes"] = shapes
    return out


def slower_ops(base: list[TraceFrames], current: list[TraceFrames], top: int = TOP) -> list[OpChange]:
    """The `top` ops and kernels whose time per step grew most from `base` to `current`, largest first."""
    both = _pooled(base).merge(_pooled(current), on=["kind", "name"], how="outer", suffixes=("_a", "_b"))
    if both.empty:
        return []
    for col in ("self_us", "total_us", "calls"):
        both[col + "_a"] = both[col + "_a"].astype(float).fillna(0.0)
        both[col + "_b"] = both[col + "_b"].astype(float).fillna(0.0)
    both["delta"] = both["self_us_b"] - both["self_us_a"]
    rows = []
    for r in both[both["delta"] > 0].sort_values("delta", ascending=False).head(top).itertuples():
        sa = r.shapes_a if isinstance(r.shapes_a, str) else None
        sb = r.shapes_b if isinstance(r.shapes_b, str) else None
        differ = sa != sb
        rows.append(OpChange(
            kind=r.kind, name=r.name, base_us=r.self_us_a, current_us=r.self_us_b,
            base_total_us=r.total_us_a, current_total_us=r.total_us_b, base_calls=r.calls_a, current_calls=r.calls_b,
            base_shapes=sa if differ else None, current_shapes=sb if differ else None,
        ))
    return rows


def _num(x: SupportsFloat | None) -> float:
    return 0.0 if x is None or (isinstance(x, float) and np.isnan(x)) else float(x)


def run_dir_trace(run_dir: str | Path, report: Report) -> TraceFrames | None:
    """The trace a run dir's report.json names (resolved inside the run dir), None without a readable one."""
    name = report.artifacts.trace
    if not name:
        return None
    try:
        return read_trace(layout.resolve_inside(run_dir, name, "trace"))
    except (OSError, ValueError):
        return None


def read_trace(path: str | Path) -> TraceFrames | None:
    """The trace at `path`, None where it cannot be read."""
    try:
        return load_trace(path)
    except (TraceError, OSError, ValueError):
        return None


def between(base: list[TraceFrames], cand: list[TraceFrames], of: str) -> tuple[list[OpChange] | None, str]:
    """The slower ops between two sides' traces (`of`: what they come from, for the note), or why none."""
    if not base or not cand:
        return None, f"no trace in the {of} of one side (--profile-steps 0?): no ops to compare"
    return slower_ops(base, cand), f"from {len(base)} base and {len(cand)} candidate traces (median per op over them)"
