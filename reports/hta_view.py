"""The GPU time table in HTA's temporal-breakdown terms, beside the per-step split, from report.json's ``hta_breakdown``.

So that a user coming from Holistic Trace Analysis finds its numbers (idle, compute, non-compute
over the kernels' span, see :mod:`advisor.temporal`) and sees the same categories per step.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor import format as fmt
from advisor.model import finite
from advisor.report import Report

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
    bd = report.hta_breakdown or {}
    ranks = [r for r in bd.get("ranks") or [] if isinstance(r, dict)]
    return [_table(r, len(ranks) > 1) for r in ranks]


def _table(r: dict, several: bool) -> HtaTable:
    span = finite(r.get("kernel_time_us")) or 0.0
    steps = [s for s in r.get("steps") or [] if isinstance(s, dict)]
    step_mean = _mean([s.get("step_us") for s in steps])
    rows = []
    for key, label, column in CATEGORY_ROWS:
        us = r.get(f"{key}_us")
        per_step = _mean([s.get(f"{key}_us") for s in steps])
        rows.append(HtaRow(label, column, fmt.time_us(us), _share(us, span), fmt.time_us(per_step),
                           _share(per_step, step_mean)))
    total = HtaRow("kernel time (first GPU event to last)", "kernel_time", fmt.time_us(span), "100%",
                   fmt.time_us(step_mean), "100%" if step_mean else fmt.DASH)
    dropped = " launched before the last ProfilerStep (HTA leaves the last step out)" if r.get("last_step_dropped") else ""
    caption = (f"GPU kernels, copies and fills{dropped}, as HTA's get_temporal_breakdown counts them; "
               f"per step: the mean over {len(steps)} ProfilerStep windows, every step included."
               if steps else
               f"GPU kernels, copies and fills{dropped}, as HTA's get_temporal_breakdown counts them; "
               "the trace has no ProfilerStep windows.")
    hta_line = (f"HTA: idle_time_pctg {_pctg(r.get('idle_us'), span)}, compute_time_pctg "
                f"{_pctg(r.get('compute_us'), span)}, non_compute_time_pctg {_pctg(r.get('non_compute_us'), span)}")
    title = f"GPU time, in HTA's terms (rank {r.get('rank')})" if several else "GPU time, in HTA's terms"
    return HtaTable(title, caption, rows, total, hta_line)


def _mean(values: list) -> float | None:
    nums = [finite(v) for v in values]
    nums = [v for v in nums if v is not None]
    return sum(nums) / len(nums) if nums else None


def _share(part, whole) -> str:
    p, w = finite(part), finite(whole)
    return fmt.frac(p / w, 1) if p is not None and w else fmt.DASH


def _pctg(part, whole) -> str:
    p, w = finite(part), finite(whole)
    return f"{round(100 * p / w, 2)}" if p is not None and w else fmt.DASH
