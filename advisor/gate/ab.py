"""`advise ab`: base and candidate revisions profiled in one job, interleaved, and judged in pairs.

Two runs made at different times (a saved baseline) cannot tell a slower commit from a slower
runner: shared runners drift 13-40% between jobs while the noise inside one job is under 1%.
So both revisions run here, on this runner, now, as whole processes (`advise profile` of SCRIPT
in each checkout, fresh runs: the code differs), alternating in counterbalanced pairs (B C, C B,
B C, ...: a drift, or a warm cache that favours the second run of a pair, hits both sides alike).
Round i is the pair (B_i, C_i); :mod:`advisor.gate.sequential` decides from the paired rounds, asks for
more when a regression is suspected but not settled, and calibrates the noise floor from the
base's rounds against each other. On a regression (or with ``ops``) :mod:`advisor.gate.opdiff` names
the ops and kernels that got slower, from the rounds' traces.

Layout of the output dir: ``base/round-NN/`` and ``candidate/round-NN/`` (ordinary run dirs),
``ab.json`` (the decision) and ``summary.md``. This module runs and judges; the command prints.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from . import compare, fingerprint, opdiff, sequential
from ..analysis import metrics
from ..analysis.steptime import CPU, DURATION, FAST_QUANTILE, fast
from ..report import Report, ReportError, load_report

DEFAULT_MAX_REGRESSION = 0.05  # paired rounds resolve smaller changes than one pair of runs
DEFAULT_ALPHA = 0.05  # the gate's false-alarm rate: all metrics, all looks
DEFAULT_ROUNDS, DEFAULT_MAX_ROUNDS = 6, 20
# On a CPU, beside the wall clock: the training process's CPU time per step (its `cpu_s`, all its
# threads), read from a run's fast steps too (FAST_QUANTILE). A neighbour that takes the cores
# delays a step; it does not add work to it, so this figure holds where wall time cannot (2-core
# runner, an MLP step of 9.6 ms: two CPU burners moved the median wall step to 16.7 ms and its CPU
# time to 9.2 ms). What a neighbour still adds (caches, memory bandwidth, the kernel's wake-ups)
# inflates some steps: beside a burner switching every 1-4 s, 2 intra-op threads, the spread of a
# round's log ratio was 0.025 at the CPU time's 5th percentile, 0.087 at its median, 0.171 at the
# wall clock's 5th percentile.
# Idle intra-op threads must sleep rather than spin for that to hold (spinning OpenMP threads
# billed 23 ms of CPU to the same step beside a burner): the rounds run with OMP_WAIT_POLICY=PASSIVE
# unless the job sets its own. It gates where the job is CPU-bound: its CPU time at least
# CPU_BOUND_FRAC of its fast wall step. A job that waits (a sleep, I/O, a GPU) is gated on the
# wall clock (the device's on a GPU: the step clock's).
CPU_BOUND_FRAC = 0.75
ROUND_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}


class ABError(ValueError):
    """Input `advise ab` cannot use: one line, exit 2."""


class RoundFailed(RuntimeError):
    """A round's script failed: one line naming the side, the round and its run dir (exit 1)."""


@dataclass
class ABOptions:
    steps: int = 20
    warmup: int = 5
    profile_steps: int = 3
    module: bool = False
    nproc: int = 1
    timeout_s: float = 600.0
    rounds: int = DEFAULT_ROUNDS
    max_rounds: int = DEFAULT_MAX_ROUNDS
    alpha: float = DEFAULT_ALPHA
    max_regression: float = DEFAULT_MAX_REGRESSION
    max_memory_regression: float = compare.DEFAULT_MAX_MEMORY_REGRESSION
    ops: bool = False  # name the slower ops even without a regression
    inconclusive: str = "fail"  # what an inconclusive verdict exits: "fail" (EXIT_INCONCLUSIVE) or "pass" (0)
    # ROUND_ENV (OMP_WAIT_POLICY=PASSIVE, unless the job sets its own): the CPU time of threads that
    # do not spin. It slows a CPU job of many small ops (minGPT's chargpt: 63 -> 84 ms a step) and so
    # dilutes a fix's ratio: `apply --check` leaves it out, to time the script as its user runs it.
    passive_threads: bool = True


@dataclass
class ABResult:
    base_dir: str
    candidate_dir: str
    script: str
    decision: sequential.Decision
    rounds: list[dict]  # each run: side, round, run_dir, wall_s, and its figures
    warnings: list[str] = field(default_factory=list)
    slower_ops: list[opdiff.OpChange] | None = None
    ops_note: str = ""
    wall_s: float = 0.0
    inconclusive_policy: str = "fail"

    @property
    def failed(self) -> bool:
        return bool(self.decision.regressions)

    @property
    def verdict(self) -> str:
        """regression, inconclusive or pass (:attr:`sequential.Decision.verdict`)."""
        return self.decision.verdict

    @property
    def exit_code(self) -> int:
        return compare.gate_exit(self.verdict, self.inconclusive_policy)

    def to_dict(self) -> dict:
        d = self.decision
        return metrics.clean({
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "inconclusive": compare.inconclusive_block(d.inconclusive, self.inconclusive_policy),
            "mode": "interleaved",
            "base": self.base_dir,
            "candidate": self.candidate_dir,
            "script": self.script,
            "rule": d.rule,
            "statistics": {"step_time": f"each run's {FAST_QUANTILE:.0%} quantile of its measured steps (its fast steps)",
                           "cpu_time": f"each run's {FAST_QUANTILE:.0%} quantile of the training process's CPU time "
                                       "per measured step (its threads) "
                                       f"(gates when the job is CPU-bound: {CPU_BOUND_FRAC:.0%} of its fast step or more)",
                           "round_env": {k: os.environ.get(k, v) for k, v in ROUND_ENV.items()},
                           "test": sequential.TEST, "correction": sequential.CORRECTION,
                           "sequential": sequential.SPENDING, "alpha": d.alpha, "looks": d.looks,
                           "decided_at_look": d.look, "rounds": d.rounds,
                           "noise_floor": "A/A: the base's back-to-back runs (rounds 2k and 2k+1) against each other"},
            "metrics": [asdict(m) for m in d.metrics],
            "regressions": [m.name for m in d.regressions],
            "history": d.history,
            "runs": self.rounds,
            "slower_ops": [r.to_dict() for r in self.slower_ops] if self.slower_ops is not None else None,
            "slower_ops_note": self.ops_note,
            "warnings": self.warnings,
            "wall_s": self.wall_s,
        })


def resolve(checkout: str | Path, script: str, module: bool, role: str) -> Path:
    """The checkout dir, checked: it exists and holds SCRIPT (a module: its top package or file)."""
    root = Path(checkout)
    if not root.is_dir():
        raise ABError(f"--{role}: {checkout!r} is not a directory (a checkout of the {role} revision)")
    if module:
        top = script.split(".")[0]
        if not ((root / top).is_dir() or (root / f"{top}.py").is_file()):
            raise ABError(f"--{role}: no module {top!r} in {root}")
        return root.resolve()
    if Path(script).is_absolute():
        raise ABError(f"SCRIPT must be a path relative to the checkouts, found in each: {script!r} is absolute")
    if not (root / script).is_file():
        raise ABError(f"--{role}: {root / script} does not exist (SCRIPT is resolved in each checkout)")
    return root.resolve()


def _command(options: ABOptions, run_dir: Path, script: str, args: list[str]) -> list[str]:
    # -P: the checkout is the working directory; a package of its own named `advisor` must not shadow advise.
    cmd = [sys.executable, "-P", "-m", "advisor", "profile", "--steps", str(options.steps), "--warmup", str(options.warmup),
           "--profile-steps", str(options.profile_steps), "--no-experiments", "--timeout", str(options.timeout_s),
           "--nproc-per-node", str(options.nproc), "--out", str(run_dir)]
    return cmd + (["-m"] if options.module else []) + [script, *args]


@dataclass
class Round:
    """One side's whole `advise profile` in a round: its report, its run dir, how long it took."""

    report: Report
    run_dir: str
    wall_s: float


def _measured(report: Report, name: str) -> list:
    """Field `name` (a step column) of report.json's un-profiled steps."""
    return [getattr(s, name) for s in report.steps if not s.profiled]


def fast_step(report: Report) -> float | None:
    """The run's step time from its fast steps (:func:`steptime.fast` of its measured, un-profiled
    steps); the report's median step where it lists too few such steps."""
    figure = fast(_measured(report, DURATION))
    return figure if figure is not None else report.throughput.step_time_median_s


def cpu_step(report: Report) -> float | None:
    """The training process's CPU time per step at its fast steps (:func:`steptime.fast` of `cpu_s`)."""
    return fast(_measured(report, CPU))


def cpu_bound(reports: list[Report], data: dict) -> tuple[bool, str]:
    """Whether the job is CPU-bound (the CPU time per step can settle the gate), and the figure said;
    `data` is :func:`series`'s, whose figures are the reports' (base then candidate)."""
    if any(r.device not in (None, "cpu") for r in reports):
        return False, "reported: a GPU job is gated on its step clock (the device's)"
    cpu: list[float | None] = data["cpu_time"][0] + data["cpu_time"][1]  # base rounds, then candidate rounds
    wall: list[float | None] = data["step_time"][0] + data["step_time"][1]
    shares = [c / w for c, w in zip(cpu, wall) if c and w]
    if len(shares) < len(reports):
        return False, "reported: some runs have no CPU time per step"
    share = float(np.median(shares))
    if share < CPU_BOUND_FRAC:
        return False, (f"reported: the step spends {share:.0%} of its fast wall time on the CPU (below "
                       f"{CPU_BOUND_FRAC:.0%}): it waits, so the wall clock gates")
    return True, ""


def fast_throughput(report: Report, key: str) -> float | None:
    """Throughput at the fast steps: the run's samples (or 1) per step over :func:`fast_step`."""
    tp, step = report.throughput, fast_step(report)
    if not step:
        return None
    if key == "steps_per_s":
        return 1.0 / step
    per_step = tp.samples_per_s / tp.steps_per_s if tp.samples_per_s and tp.steps_per_s else None
    return per_step / step if per_step else None


def _figures(report: Report) -> dict:
    tp = report.throughput
    return {"samples_per_s": tp.samples_per_s, "steps_per_s": tp.steps_per_s,
            "step_time_median_s": tp.step_time_median_s, "step_time_fast_s": fast_step(report),
            "cpu_step_s": cpu_step(report),
            "memory": {k: v for k, (v, _) in compare.memory_figures(report).items()}}


def run_round(side: str, checkout: Path, index: int, options: ABOptions, script: str, args: list[str],
              out: Path, env_of: Mapping[str, str] | None = None) -> Round:
    """One whole `advise profile` of SCRIPT in `checkout`: its typed report (RoundFailed when not ok).
    `env_of`: variables this side's runs set over the environment (a check's PYTHONPATH into its copy)."""
    run_dir = out / side / f"round-{index:02d}"
    # The rounds' own summaries stay out of the job's; the job's own OMP_WAIT_POLICY wins over ROUND_ENV's.
    env = {**(ROUND_ENV if options.passive_threads else {}),
           **{k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}, **(env_of or {})}
    started = time.monotonic()
    proc = subprocess.run(_command(options, run_dir, script, args), cwd=checkout, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - started
    if proc.returncode in (130, 129, 143):
        raise KeyboardInterrupt
    try:
        report = load_report(run_dir / "report.json")
    except ReportError:
        last = (proc.stderr.strip().splitlines() or ["no report written"])[-1]
        raise RoundFailed(f"{side} round {index}: advise profile exited {proc.returncode}: {last}") from None
    if report.status != "ok":
        raise RoundFailed(f"{side} round {index}: the script's run is {report.status!r}"
                          + (f" ({report.error})" if report.error else "") + f": see {run_dir}")
    return Round(report, str(run_dir), wall)


def specs(options: ABOptions, unit: str, memory_label: str | None,
          cpu: tuple[bool, str] | None = None) -> list[sequential.MetricSpec]:
    """The gate's metrics; `cpu`: (whether the CPU time per step gates, why not) where the runs have it."""
    out = [sequential.MetricSpec("step_time", f"step time (p{FAST_QUANTILE * 100:.0f} of steps)", "s", False,
                                 options.max_regression),
           sequential.MetricSpec("throughput", f"throughput ({unit}, at p{FAST_QUANTILE * 100:.0f} step)", unit, True,
                                 options.max_regression, mirrors="step_time")]
    if cpu is not None:
        gated, why = cpu
        out.append(sequential.MetricSpec("cpu_time", f"CPU time per step (p{FAST_QUANTILE * 100:.0f})", "s", False,
                                         options.max_regression,
                                         settles="step_time", gated=gated, note=why))
    if memory_label:
        out.append(sequential.MetricSpec("peak_memory", memory_label, "bytes", False, options.max_memory_regression,
                                         min_abs=compare.MEMORY_FLOOR_BYTES))
    return out


def series(base: list[Report], cand: list[Report]) -> tuple[dict, str, str | None]:
    """Per metric, (base rounds, candidate rounds); the throughput's unit; the memory figure's label.

    Step time and throughput are one figure (the run's fast steps, :func:`fast_step`), tested once;
    the CPU time per step (:func:`cpu_step`) where every run has it."""
    reports = base + cand
    by_samples = all(r.throughput.samples_per_s for r in reports)
    unit, key = ("samples/s", "samples_per_s") if by_samples else ("steps/s", "steps_per_s")
    out = {"step_time": ([fast_step(r) for r in base], [fast_step(r) for r in cand]),
           "throughput": ([fast_throughput(r, key) for r in base], [fast_throughput(r, key) for r in cand])}
    cpu = [cpu_step(r) for r in reports]
    if all(cpu):
        out["cpu_time"] = (cpu[:len(base)], cpu[len(base):])
    figures = [compare.memory_figures(r) for r in reports]
    common = [b for b, _, _ in compare.MEMORY_FIGURES if all(b in f for f in figures)]
    label = None
    if common:
        basis = common[0]
        label = figures[0][basis][1]
        out["peak_memory"] = ([compare.memory_figures(r)[basis][0] for r in base],
                              [compare.memory_figures(r)[basis][0] for r in cand])
    return out, unit, label


def _traces(rounds: list[Round]) -> list:
    return [t for t in (opdiff.run_dir_trace(r.run_dir, r.report) for r in rounds) if t is not None]


def where_the_time_went(base: list[Round], cand: list[Round]) -> tuple[list[opdiff.OpChange] | None, str]:
    """The slower ops from the rounds' traces, or why there are none."""
    tb, tc = _traces(base), _traces(cand)
    if not tb or not tc:
        return None, "no trace in the rounds of one side (--profile-steps 0?): no ops to compare"
    return opdiff.slower_ops(tb, tc), f"from {len(tb)} base and {len(tc)} candidate traces (median per op over them)"


MAX_LENGTHEN = 4  # rounds grow to at most this many times --steps


def longer(current: ABOptions, options: ABOptions, decision: sequential.Decision) -> ABOptions:
    """The next rounds' options: twice the steps (up to MAX_LENGTHEN x --steps) while a gated metric's
    A/A floor is above its threshold. A neighbour's burst covers less of a longer run, so its fast
    steps read the code's own speed more often: the floor falls where the rounds are spent."""
    blind = any(m.gated and m.floor is not None and m.floor > m.threshold for m in decision.metrics)
    steps = min(current.steps * 2, options.steps * MAX_LENGTHEN)
    if not blind or steps == current.steps:
        return current
    return replace(current, steps=steps)


def run_ab(base_dir: str, candidate_dir: str, script: str, args: list[str], options: ABOptions, out: Path,
           on_run: Callable[[str, int, Report], None] | None = None,
           env_of: Mapping[str, Mapping[str, str]] | None = None) -> ABResult:
    """Profile SCRIPT in both checkouts in interleaved rounds until the sequential decision is final
    (`env_of`: each side's own variables, by "base" and "candidate")."""
    base_root = resolve(base_dir, script, options.module, "base")
    cand_root = resolve(candidate_dir, script, options.module, "candidate")
    if base_root == cand_root:
        raise ABError(f"--base and --candidate are the same directory ({base_root}): give two checkouts")
    plan = sequential.looks(options.rounds, options.max_rounds)
    out = Path(out).resolve()  # the rounds run in the checkouts: their run dirs must not follow them there
    started = time.monotonic()
    base: list[Round] = []
    cand: list[Round] = []
    runs: list[dict] = []
    history: list[dict] = []
    decision = None
    lengths: list[int] = []  # each round's measured steps: longer rounds once the floor is found above the threshold
    current = options
    for index in range(1, plan[-1] + 1):
        order = (("base", base_root, base), ("candidate", cand_root, cand))
        lengths.append(current.steps)
        for side, root, into in (order if index % 2 else order[::-1]):  # B C, C B, B C, ...
            done = run_round(side, root, index, current, script, args, out, (env_of or {}).get(side))
            into.append(done)
            runs.append({"side": side, "round": index, "run_dir": os.path.relpath(done.run_dir, out),
                         "steps": current.steps, "wall_s": done.wall_s, **_figures(done.report)})
            if on_run is not None:
                on_run(side, index, done.report)
        if index not in plan:
            continue
        data, unit, memory_label = series([r.report for r in base], [r.report for r in cand])
        cpu = cpu_bound([r.report for r in base + cand], data) if "cpu_time" in data else None
        decision = sequential.decide(data, specs(options, unit, memory_label, cpu), alpha=options.alpha, plan=plan,
                                     lengths=lengths)
        history.append({"rounds": index, "look": decision.look, "final": decision.final, "steps": current.steps,
                        "slowdowns": {m.name: m.slowdown for m in decision.metrics},
                        "p_values": {m.name: m.p_value for m in decision.metrics},
                        "regressions": [m.name for m in decision.regressions]})
        if decision.final:
            break
        current = longer(current, options, decision)
    assert decision is not None
    decision.history = history
    warnings = [d.text() for d in fingerprint.differences(base[0].report, cand[0].report)]
    result = ABResult(str(base_dir), str(candidate_dir), script, decision, runs, warnings, wall_s=time.monotonic() - started,
                      inconclusive_policy=options.inconclusive)
    if result.failed or options.ops:
        result.slower_ops, result.ops_note = where_the_time_went(base, cand)
    return result
