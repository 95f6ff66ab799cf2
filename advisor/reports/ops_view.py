"""The top operators (CPU ops by self time) and GPU kernels (by device time) of the profiled steps.

From the Profile's trace frames (``ops``, ``kernels``, ``trace_steps``; see :mod:`advisor.trace`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dataclasses import dataclass

import pandas as pd

from advisor import units
from advisor.report import Report

if TYPE_CHECKING:
    from advisor.profile import Profile

TOP_OPS = 15
TOP_KERNELS = 10
NAME_MAX = 110  # longer op / kernel names are cut in the table (full name in the tooltip)
NOT_TYPES = ("Scalar", "ScalarList", "TensorList", "")
TRACE_NOTE = "trace not loaded: "  # how Profile.from_run_dir notes a broken trace


@dataclass
class OpRow:
    """An operator or kernel, aggregated over the profiled steps."""

    name: str
    full_name: str
    calls: str
    self_time: str
    total_time: str
    share: str
    bar: float  # 0..100, the share relative to the top row
    per_step: str
    flops: str
    dtypes: str


@dataclass
class OpsTable:
    """The top operators (CPU ops by self time) or GPU kernels (by time)."""

    title: str
    caption: str
    rows: list[OpRow]
    flops_column: bool


def top_tables(report: Report, profile: Profile | None) -> tuple[list[OpsTable], str]:
    """The top CPU ops and, with a GPU trace, the top kernels; or why there are none."""
    if profile is None or profile.trace is None:
        return [], _no_trace(report, profile)
    tables = profile.derived("top_tables", lambda: _tables(profile))
    return tables, "" if tables else "the trace holds no operators"


def _tables(profile: Profile) -> list[OpsTable]:
    n_steps = len(profile.trace_steps)
    return [t for t in (ops_table(profile.ops, n_steps), kernels_table(profile.kernels, n_steps)) if t is not None]


def _no_trace(report: Report, profile: Profile | None) -> str:
    trace = report.artifacts.trace
    if not trace:
        return "no trace was recorded in this run (the profiler window did not run)"
    if profile is None:
        return f"the trace {trace} was not loaded for this rendering"
    why = [n.removeprefix(TRACE_NOTE) for n in profile.meta.notes if n.startswith(TRACE_NOTE)]
    return f"the trace could not be read: {why[0]}" if why else f"the trace {trace} is not in the run dir"


def ops_table(ops: pd.DataFrame, n_steps: int) -> OpsTable | None:
    if ops is None or ops.empty:
        return None
    g = ops.groupby("name", sort=False).agg(calls=("name", "size"), self_us=("self_us", "sum"), dur_us=("dur_us", "sum"),
                                            flops=("flops", "sum"))
    types = ops.dropna(subset=["input_types"]).groupby("name", sort=False)["input_types"].first() if "input_types" in ops else None
    total_self = float(g["self_us"].sum()) or 1.0
    top = g.sort_values(["self_us", "calls"], ascending=False).head(TOP_OPS)
    first = float(top["self_us"].iloc[0]) or 1.0
    rows = [OpRow(
        name=short_name(str(name)), full_name=str(name), calls=units.count(r["calls"]),
        self_time=units.time_us(r["self_us"]), total_time=units.time_us(r["dur_us"]),
        share=units.frac(r["self_us"] / total_self, 1), bar=round(100 * float(r["self_us"]) / first, 1),
        per_step=units.time_us(r["self_us"] / n_steps) if n_steps else units.DASH,
        flops=units.flops(r["flops"]), dtypes=_dtypes(types.get(name) if types is not None else None),
    ) for name, r in top.iterrows()]
    steps = f"{n_steps} profiled step{'s' if n_steps != 1 else ''}" if n_steps else "the whole trace"
    return OpsTable("CPU operators", f"by self time over {steps}; {len(g):,} distinct operators, {len(ops):,} calls",
                    rows, flops_column=bool(g["flops"].fillna(0).gt(0).any()))


def kernels_table(kernels: pd.DataFrame, n_steps: int) -> OpsTable | None:
    if kernels is None or kernels.empty:
        return None
    g = kernels.groupby("name", sort=False).agg(calls=("name", "size"), dur_us=("dur_us", "sum"))
    total = float(g["dur_us"].sum()) or 1.0
    top = g.sort_values(["dur_us", "calls"], ascending=False).head(TOP_KERNELS)
    first = float(top["dur_us"].iloc[0]) or 1.0
    rows = [OpRow(
        name=short_name(str(name)), full_name=str(name), calls=units.count(r["calls"]), self_time=units.time_us(r["dur_us"]),
        total_time=units.time_us(r["dur_us"]), share=units.frac(r["dur_us"] / total, 1), bar=round(100 * float(r["dur_us"]) / first, 1),
        per_step=units.time_us(r["dur_us"] / n_steps) if n_steps else units.DASH, flops="", dtypes="",
    ) for name, r in top.iterrows()]
    return OpsTable("GPU kernels", f"by time on the device; {len(g):,} distinct kernels, {len(kernels):,} launches", rows, False)


def short_name(name: str) -> str:
    return name if len(name) <= NAME_MAX else name[: NAME_MAX - 1] + "…"


def _dtypes(types: object) -> str:
    if not isinstance(types, (list, tuple)):
        return ""
    seen: list[str] = []
    for t in types:
        if t and t not in seen and t not in NOT_TYPES:
            seen.append(str(t))
    return ", ".join(seen[:3])
