"""The GPU time table in HTA's temporal-breakdown terms, beside the per-step split, from report.json's ``hta_breakdown``.

So that a user coming from Holistic Trace Analysis finds its numbers (idle, compute, non-compute
over the kernels' span, see :mod:`advisor.analysis.temporal`) and sees the same categories per step.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor import units
from advisor.report import Report
from advisor.report_blocks import HtaRank

# category -> (label, the HTA column it is or belongs to)
CATEGORY_ROWS = (
    ("compute", "compute", "compute_time"),
    ("communication", "communication (NCCL)", "non_compute_time"),
    ("memory", "memory (memcpy, memset)", "non_compute_time"),
    ("other", "other", "non_compute_time"),
    ("idle", "idle", "idle_time"),
)


@dataclass
class HtaRow:
    label: str
    hta_column: str
    time: str  # over the trace, as HTA counts it
    share: str  # of HTA's kernel_time
    per_step: str  # mean over the ProfilerSteps
    step_share: str  # of the mean step


@dataclass
class HtaTable:
    title: str
    caption: str
    rows: list[HtaRow]
    total: HtaRow
    hta_line: str  # HTA's own three percentages, as its table prints them


def hta_tables(report: Report) -> list[HtaTable]:
    """One table per rank; none when the trace has no GPU events."""
    ranks = (report.hta_breakdown.ranks or []) if report.hta_breakdown is not None else []
    return [_table(r, len(ranks) > 1) for r in ranks]


def _table(r: HtaRank, several: bool) -> HtaTable:
    span = units.finite(r.kernel_time_us) or 0.0
    steps = r.steps or []
    step_mean = _mean([s.step_us for s in steps])
    rows = []
    for key, label, column in CATEGORY_ROWS:
        us = getattr(r, f"{key}_us")
        per_step = _mean([getattr(s, f"{key}_us") for s in steps])
        rows.append(HtaRow(label, column, units.time_us(us), _share(us, span), units.time_us(per_step),
                           _share(per_step, step_mean)))
    total = HtaRow("kernel time (first GPU event to last)", "kernel_time", units.time_us(span), "100%",
                   units.time_us(step_mean), "100%" if step_mean else units.DASH)
    dropped = " launched before the last ProfilerStep (HTA leaves the last step out)" if r.last_step_dropped else ""
    caption = (f"GPU kernels, copies and fills{dropped}, as HTA's get_temporal_breakdown counts them; "
               f"per step: the mean over {len(steps)} ProfilerStep windows, every step included."
               if steps else
               f"GPU kernels, copies and fills{dropped}, as HTA's get_temporal_breakdown counts them; "
               "the trace has no ProfilerStep windows.")
    hta_line = (f"HTA: idle_time_pctg {_pctg(r.idle_us, span)}, compute_time_pctg "
                f"{_pctg(r.compute_us, span)}, non_compute_time_pctg {_pctg(r.non_compute_us, span)}")
    title = f"GPU time, in HTA's terms (rank {r.rank})" if several else "GPU time, in HTA's terms"
    return HtaTable(title, caption, rows, total, hta_line)


def _mean(values: list) -> float | None:
    nums = [v for v in map(units.finite, values) if v is not None]
    return sum(nums) / len(nums) if nums else None


def _share(part: object, whole: object) -> str:
    p, w = units.finite(part), units.finite(whole)
    return units.frac(p / w, 1) if p is not None and w else units.DASH


def _pctg(part: object, whole: object) -> str:
    p, w = units.finite(part), units.finite(whole)
    return f"{round(100 * p / w, 2)}" if p is not None and w else units.DASH
