"""What the run was: where a step's time goes, the measured steps, the environment, the run dir's files.

Read from the report dict alone (the report.json contract); nothing here opens a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from urllib.parse import quote

from advisor import format as fmt
from advisor.model import finite

from .words import plural, throughput_basis

MAX_STEP_ROWS = 200  # the steps table; steps.csv has them all
ENV_ORDER = ["python", "torch", "cuda", "device", "device_name", "device_capability", "device_memory_bytes", "device_count",
             "cpu_count", "physical_cores", "torch_threads", "platform", "hostname", "rank", "local_rank", "world_size"]
BREAKDOWN_PARTS = [  # (report key, css class, label); `other_frac` shows when the report has it
    ("data_wait_frac", "data", "data wait"),
    ("compute_frac", "compute", "forward/backward"),
    ("optimizer_frac", "optimizer", "optimizer"),
    ("other_frac", "other", "other"),
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


def rank_rows(report: dict) -> list[RankRow]:
    """A launched job's ranks (their own steps) or an analysed set of traces (their profiled steps)."""
    rows = []
    for r in report.get("ranks") or []:
        median = r.get("step_time_median_s", r.get("duration_s"))
        rows.append(RankRow(str(r.get("rank")), str(r.get("status") or fmt.DASH), fmt.time_s(finite(median)),
                            fmt.time_s(finite(r.get("step_time_p90_s"))), fmt.time_s(finite(r.get("exposed_comm_s"))),
                            fmt.rate(finite(r.get("samples_per_s")), "samples/s"), str(r.get("error") or ""),
                            _node(r)))
    return rows


def _node(rank: dict) -> str:
    if rank.get("node") is None:
        return ""
    return f"{rank['node']} ({rank['host']})" if rank.get("host") else str(rank["node"])


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


def breakdown(report: dict) -> Breakdown | None:
    bd, tp = report.get("breakdown") or {}, report.get("throughput") or {}
    step = finite(tp.get("step_time_mean_s")) or finite(tp.get("step_time_median_s"))
    parts = [(cls, label, float(bd[key])) for key, cls, label in BREAKDOWN_PARTS if finite(bd.get(key)) is not None]
    if not parts or sum(p[2] for p in parts) <= 0:
        return None
    total = sum(max(0.0, f) for _, _, f in parts)
    segments = []
    for cls, label, f in parts:
        width = round(100 * max(0.0, f) / total, 2)
        segments.append(BreakdownSegment(cls, label, fmt.frac(f), width,
                                         f"{fmt.time_s(f * step)} per step" if step else "", width >= 12))
    return Breakdown(segments, throughput_basis(tp) or "over the measured steps")


def step_row(s: dict) -> StepRow:
    loss = finite(s.get("loss"))
    return StepRow(
        index=str(s.get("index", "")), duration=fmt.time_s(s.get("duration_s")), data_wait=fmt.time_s(s.get("data_wait_s")),
        optimizer=fmt.time_s(s.get("optimizer_s")), backward=fmt.time_s(s.get("backward_s")), samples=fmt.count(s.get("samples")),
        loss=f"{loss:.4g}" if loss is not None else fmt.DASH, profiled="yes" if s.get("profiled") else "",
    )


def step_rows(report: dict) -> list[StepRow]:
    return [step_row(s) for s in (report.get("steps") or [])[:MAX_STEP_ROWS]]


def steps_summary(report: dict) -> str:
    steps = report.get("steps") or []
    prof = sum(1 for s in steps if s.get("profiled"))
    if not steps:
        return "no measured steps"
    if len(steps) > MAX_STEP_ROWS:
        return (f"the first {MAX_STEP_ROWS} of {len(steps)} measured steps ({prof} under the profiler); "
                "steps.csv in the run dir has them all")
    basis = throughput_basis(report.get("throughput") or {}) or "over all of them"
    return f"{plural(len(steps), 'measured step')} ({prof} under the profiler, whose overhead inflates them; throughput is {basis})"


def env_rows(report: dict) -> list[Row]:
    env = report.get("env") or {}
    keys = [k for k in ENV_ORDER if k in env] + sorted(k for k in env if k not in ENV_ORDER)
    rows = [Row(k, fmt.by_suffix(k, env[k])) for k in keys if env[k] is not None]
    if report.get("step_source"):
        rows.append(Row("step_source", str(report["step_source"])))
    return rows


def observed_rows(report: dict) -> list[Row]:
    observed, memory = report.get("observed") or {}, report.get("memory") or {}
    rows = []
    for i, o in enumerate(observed.get("optimizers") or []):
        if isinstance(o, dict):
            rows.append(Row(f"optimizer {i}", _kv(o, first="class")))
    for i, d in enumerate(observed.get("dataloaders") or []):
        if isinstance(d, dict):
            rows.append(Row(f"DataLoader {i}", _kv(d, first="dataset")))
    for k, v in observed.items():
        if k not in ("optimizers", "dataloaders") and v is not None:
            rows.append(Row(k, fmt.value(v)))
    for k, v in memory.items():
        if v is not None:
            rows.append(Row(k, fmt.by_suffix(k, v)))
    return rows


def _kv(d: dict, first: str) -> str:
    head = str(d.get(first, "")) if d.get(first) is not None else ""
    rest = ", ".join(f"{k}={fmt.value(v)}" for k, v in d.items() if k != first and v is not None)
    return f"{head} ({rest})" if head and rest else head or rest


def utilization_rows(report: dict) -> list[Row]:
    """report.json's `utilization` means and maxima, labelled and formatted by unit."""
    return [Row(_util_label(k), fmt.by_suffix(k.rsplit("_", 1)[0], v))  # drop _mean / _max for the unit
            for k, v in (report.get("utilization") or {}).items()]


def _util_label(key: str) -> str:
    return key.replace("_percent", " %").replace("_bytes", "").replace("_w_", " W ").replace("_", " ")


def artifact_links(report: dict) -> list[Artifact]:
    return [Artifact(str(path), href(path), ARTIFACT_TEXT.get(key, ""))
            for key, path in (report.get("artifacts") or {}).items() if path]


def href(path) -> str:
    """A link relative to report.html (which sits in the run dir); an absolute path (`advise analyze`
    keeps the user's trace where it is) becomes a file URL."""
    p = PurePath(str(path))
    return p.as_uri() if p.is_absolute() else quote(str(path))


def trace_href(report: dict) -> str:
    trace = (report.get("artifacts") or {}).get("trace")
    return href(trace) if trace else ""
