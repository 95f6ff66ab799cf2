"""What the run was: where a step's time goes, the measured steps, the environment, the run dir's files.

Read from the report alone (the report.json contract, typed: :class:`advisor.report.Report`); nothing
here opens a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from urllib.parse import quote

import msgspec

from advisor.reports import format as fmt
from advisor import units
from advisor.report import Report
from advisor.report_blocks import Step
from advisor.run_dir.seen import LoaderSeen, OptimizerSeen

from .words import plural, throughput_basis

MAX_STEP_ROWS = 200  # the steps table; steps.csv has them all
ENV_ORDER = ["python", "torch", "cuda", "device", "device_name", "device_capability", "device_memory_bytes", "device_count",
             "cpu_count", "physical_cores", "torch_threads", "platform", "hostname", "rank", "local_rank", "world_size"]
BREAKDOWN_PARTS = [  # (report key, css class, label)
    ("data_wait_frac", "data", "data wait"),
    ("compute_frac", "compute", "forward/backward"),
    ("optimizer_frac", "optimizer", "optimizer"),
]
ARTIFACT_TEXT = {
    "report_json": "this report as data (the versioned contract)",
    "trace": "Kineto trace of the profiled steps",
    "steps_csv": "one row per measured step",
    "samples_csv": "the sampler's ticks (CPU, RSS; GPU with NVML)",
    "log": "the script's stdout and stderr",
}


@dataclass
class RankRow:
    """One rank of a multi-rank job (report.json `ranks`): how it ended and its step times."""

    rank: str
    status: str
    step_median: str
    step_p90: str
    exposed_comm: str
    samples_per_s: str
    error: str
    node: str = ""  # a job a launcher started: the node it ran on and its host ("1 (gpu-07)")


def rank_rows(report: Report) -> list[RankRow]:
    """A launched job's ranks (their own steps) or an analysed set of traces (their profiled steps)."""
    return [RankRow(str(r.rank), str(r.status or units.DASH), units.time_s(units.finite(r.step_s)),
                    units.time_s(units.finite(r.step_time_p90_s)), units.time_s(units.finite(r.exposed_comm_s)),
                    units.rate(units.finite(r.samples_per_s), "samples/s"), str(r.error or ""),
                    "" if r.node is None else f"{r.node} ({r.host})" if r.host else str(r.node))
            for r in report.ranks]


@dataclass
class Row:
    """A key and its formatted value (evidence, environment)."""

    key: str
    value: str


@dataclass
class BreakdownSegment:
    """A share of the step in the breakdown bar."""

    cls: str
    label: str
    pct: str
    width: float  # percent of the bar
    per_step: str
    wide: bool  # room to print the label inside the bar


@dataclass
class Breakdown:
    """Where a step's time goes, from the report's `breakdown`."""

    segments: list[BreakdownSegment]
    basis: str


@dataclass
class StepRow:
    """A measured step in the steps table."""

    index: str
    duration: str
    data_wait: str
    optimizer: str
    backward: str
    samples: str
    loss: str
    profiled: str


@dataclass
class Artifact:
    """A file of the run dir, linked relative to report.html."""

    label: str
    href: str
    description: str


def breakdown(report: Report) -> Breakdown | None:
    bd, tp = report.breakdown, report.throughput
    step = units.finite(tp.step_time_mean_s) or units.finite(tp.step_time_median_s)
    parts = [(cls, label, float(getattr(bd, key))) for key, cls, label in BREAKDOWN_PARTS
             if units.finite(getattr(bd, key)) is not None]
    if not parts or sum(p[2] for p in parts) <= 0:
        return None
    total = sum(max(0.0, f) for _, _, f in parts)
    segments = []
    for cls, label, f in parts:
        width = round(100 * max(0.0, f) / total, 2)
        segments.append(BreakdownSegment(cls, label, units.frac(f), width,
                                         f"{units.time_s(f * step)} per step" if step else "", width >= 12))
    return Breakdown(segments, throughput_basis(tp) or "over the measured steps")


def step_row(s: Step) -> StepRow:
    loss = units.finite(s.loss)
    return StepRow(
        index="" if s.index is None else str(s.index), duration=units.time_s(s.duration_s),
        data_wait=units.time_s(s.data_wait_s), optimizer=units.time_s(s.optimizer_s), backward=units.time_s(s.backward_s),
        samples=units.count(s.samples), loss=f"{loss:.4g}" if loss is not None else units.DASH,
        profiled="yes" if s.profiled else "",
    )


def step_rows(report: Report) -> list[StepRow]:
    return [step_row(s) for s in report.steps[:MAX_STEP_ROWS]]


def steps_summary(report: Report) -> str:
    steps = report.steps
    prof = sum(1 for s in steps if s.profiled)
    if not steps:
        return "no measured steps"
    if len(steps) > MAX_STEP_ROWS:
        return (f"the first {MAX_STEP_ROWS} of {len(steps)} measured steps ({prof} under the profiler); "
                "steps.csv in the run dir has them all")
    basis = throughput_basis(report.throughput) or "over all of them"
    if report.steps_window == "quiet":  # none of them ran under the profiler: the look's steps (experiments/look.py)
        return (f"{plural(len(steps), 'measured step')} of a quiet window measured after the profiled one, which a "
                f"neighbour disturbed; throughput is {basis}")
    return f"{plural(len(steps), 'measured step')} ({prof} under the profiler, whose overhead inflates them; throughput is {basis})"


def env_rows(report: Report) -> list[Row]:
    env = msgspec.to_builtins(report.env)
    keys = [k for k in ENV_ORDER if k in env] + sorted(k for k in env if k not in ENV_ORDER)
    rows = [Row(k, fmt.by_suffix(k, env[k])) for k in keys if env[k] is not None]
    if report.step_source:
        rows.append(Row("step_source", str(report.step_source)))
    return rows


def observed_rows(report: Report) -> list[Row]:
    observed, memory = report.observed, msgspec.to_builtins(report.memory)
    rows = [Row(f"optimizer {i}", _kv(o.cls, o)) for i, o in enumerate(observed.optimizers)]
    rows += [Row(f"DataLoader {i}", _kv(d.dataset, d)) for i, d in enumerate(observed.dataloaders)]
    for k, v in msgspec.to_builtins(observed).items():  # every other field the probe observed, as it is named
        if k not in ("optimizers", "dataloaders") and v not in (None, {}, []):
            rows.append(Row(k, fmt.value(v)))
    for k, v in memory.items():
        if v is not None:
            rows.append(Row(k, fmt.by_suffix(k, v)))
    return rows


def _kv(head: object, seen: OptimizerSeen | LoaderSeen) -> str:
    """`head` (its class, its dataset), then the rest of what was seen of it."""
    said = str(head) if head is not None else ""
    fields = msgspec.to_builtins(seen)
    fields.pop("class" if isinstance(seen, OptimizerSeen) else "dataset", None)
    rest = ", ".join(f"{k}={fmt.value(v)}" for k, v in fields.items() if v is not None)
    return f"{said} ({rest})" if said and rest else said or rest


def utilization_rows(report: Report) -> list[Row]:
    """report.json's `utilization` means and maxima, labelled and formatted by unit."""
    return [Row(_util_label(k), fmt.by_suffix(k.rsplit("_", 1)[0], v))  # drop _mean / _max for the unit
            for k, v in msgspec.structs.asdict(report.utilization).items() if v is not None]


def _util_label(key: str) -> str:
    return key.replace("_percent", " %").replace("_bytes", "").replace("_w_", " W ").replace("_", " ")


def artifact_links(report: Report) -> list[Artifact]:
    return [Artifact(str(path), href(path), ARTIFACT_TEXT.get(key, ""))
            for key, path in report.artifacts.listed()]


def href(path: object) -> str:
    """A link relative to report.html (which sits in the run dir); an absolute path (`advise analyze`
    keeps the user's trace where it is) becomes a file URL."""
    p = PurePath(str(path))
    return p.as_uri() if p.is_absolute() else quote(str(path))


def trace_href(report: Report) -> str:
    trace = report.artifacts.trace
    return href(trace) if trace else ""
