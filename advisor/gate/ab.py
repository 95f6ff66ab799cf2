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

Each run's measured window is sized in time (``window_s``): a pilot run of the base (``base/round-00``,
not judged) times a step, and the rounds measure as many steps as fill the window at the step's
fast pace (at least ``--steps``), so a neighbour's burst of a few seconds cannot cover a whole run.
A round where a neighbour took nearly the whole machine is set aside and replaced
(:mod:`advisor.gate.neighbour`). The gate stops at ``max_rounds`` or before its time budget
(``time_budget_s``) would run out, whichever comes first; that look is then its last, and the
decision says where the time went.

Layout of the output dir: ``base/round-NN/`` and ``candidate/round-NN/`` (ordinary run dirs),
``ab.json`` (the decision) and ``summary.md``. This module runs and judges; the command prints.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import psutil

from . import compare, fingerprint, neighbour, opdiff, sequential
from ..analysis.steptime import CPU, DURATION, FAST_QUANTILE, fast
from ..report import Report, ReportError, load_report
from ..run_dir.atomic import clean
from ..run_dir.interrupt import Interrupted, deferred

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
# Chosen by measurement (2-core runner, unchanged MLP, CPU burners on 1-4 s / off 0-3 s, the machine
# shared with other jobs): the spread (sd) of a round's log ratio was 0.18 for the CPU time's 5th
# percentile over 150 steps (about 3 s) and 0.085 over 300 (6-10 s); the wall clock's 0.24 and
# 0.14. Instructions retired would be steadier still, but this runner's kernel has no PMU driver
# (perf: "software events only"), as on most virtual CI runners, so the CPU time gates.
CPU_BOUND_FRAC = 0.75
# Which steps are a run's quiet ones for that test: beside two burners and other jobs on 2 cores, an
# unchanged MLP loop's steps computed 50-70% of their wall time at the median, 80-100% at the 99th
# percentile; its fast steps' CPU time over their wall time (p5 over p5) read 0.64.
QUIET_QUANTILE = 0.99
ROUND_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}
# A run's measured window, in seconds of the pilot's fast steps: long enough that a neighbour's
# burst of a few seconds covers only part of it (doubling it from 3 s halved the CPU time's spread).
DEFAULT_WINDOW_S = 6.0
DEFAULT_TIME_BUDGET_S = 300.0  # the whole gate: pilot, rounds, decision (5 min, within a 6-minute CI step)
MAX_WINDOW_STEPS = 20_000


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
    window_s: float = 0.0  # each run's measured window in seconds (a pilot run sizes it); 0: --steps alone
    time_budget_s: float | None = None  # the gate stops before this would run out (its last look); None: rounds only
    turn_s: float = 0.5  # duet mode: each side's turn, seconds (advisor.gate.duets)
    turns: int = 12  # duet mode: turns per side in each restart


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
    time: dict = field(default_factory=dict)  # where the time went (:func:`time_spent`)
    set_aside: list[dict] = field(default_factory=list)  # rounds set aside for a neighbour's load, and why
    mode: str = "interleaved"  # or "duet" (advisor.gate.duets: both sides alive, taking turns)
    statistics: dict | None = None  # how the figures were read, where not the interleaved runs' (STATISTICS)

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
        return clean({
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "inconclusive": compare.inconclusive_block(d.inconclusive, self.inconclusive_policy),
            "mode": self.mode,
            "base": self.base_dir,
            "candidate": self.candidate_dir,
            "script": self.script,
            "rule": d.rule,
            "decided_by": d.decided_by(),
            "time": self.time,
            "set_aside": self.set_aside,
            "statistics": {**(self.statistics or statistics()), "alpha": d.alpha, "looks": d.looks,
                           "decided_at_look": d.look, "rounds": d.rounds},
            "metrics": [asdict(m) for m in d.metrics],
            "regressions": [m.name for m in d.regressions],
            "history": d.history,
            "runs": self.rounds,
            "slower_ops": [r.to_dict() for r in self.slower_ops] if self.slower_ops is not None else None,
            "slower_ops_note": self.ops_note,
            "warnings": self.warnings,
            "wall_s": self.wall_s,
        })


def statistics() -> dict:
    """How the interleaved runs' figures are read and judged (ab.json's `statistics`)."""
    return {"step_time": f"each run's {FAST_QUANTILE:.0%} quantile of its measured steps (its fast steps)",
            "cpu_time": f"each run's {FAST_QUANTILE:.0%} quantile of the training process's CPU time per measured step "
                        f"(its threads) (gates when the job is CPU-bound: {CPU_BOUND_FRAC:.0%} or more of its quiet "
                        f"steps' wall time, p{QUIET_QUANTILE * 100:.0f} of the steps' CPU share)",
            "round_env": {k: os.environ.get(k, v) for k, v in ROUND_ENV.items()},
            "test": sequential.TEST, "correction": sequential.CORRECTION, "sequential": sequential.SPENDING,
            "noise_floor": "A/A: the base's back-to-back runs (rounds 2k and 2k+1) against each other",
            "pass": "equivalence: every gated metric's one-sided 95% upper bound below its threshold, and its "
                    "minimum detectable change ((t(0.975) + t(0.8)) x SE) no larger",
            "window": "each run's measured steps fill the window's seconds at the pilot's fast pace",
            "neighbour": f"a round is set aside where other processes used {neighbour.SET_ASIDE_SHARE:.0%} "
                         f"of the cores over a run's window (at most {neighbour.MAX_SET_ASIDE} a gate)"}


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


def checkouts(base_dir: str, candidate_dir: str, script: str, module: bool) -> dict[str, Path]:
    """Both sides' checkouts, checked (:func:`resolve`) and not the same directory."""
    roots = {"base": resolve(base_dir, script, module, "base"), "candidate": resolve(candidate_dir, script, module, "candidate")}
    if roots["base"] == roots["candidate"]:
        raise ABError(f"--base and --candidate are the same directory ({roots['base']}): give two checkouts")
    return roots


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


def busy_share(report: Report) -> float | None:
    """How much of a step the process computes at its quietest steps: the 99th percentile of each
    measured step's CPU time over its wall time. A neighbour only lowers a step's share (it delays
    the step, the CPU time stays), so the quiet steps show the job's own: about 1 for a CPU-bound
    loop however busy the runner, lower for one that sleeps or waits on I/O in every step. (The
    shares of the runs' fast steps, p5 over p5, fell to 0.6 beside two burners for the same loop.)"""
    shares = [c / d for c, d in zip(_measured(report, CPU), _measured(report, DURATION))
              if isinstance(c, (int, float)) and isinstance(d, (int, float)) and d > 0 and c >= 0]
    return quiet_share(shares)


def quiet_share(shares: list[float]) -> float | None:
    """The steps' CPU share at the quiet steps (its QUIET_QUANTILE), None with fewer than 4 steps."""
    return float(np.quantile(shares, QUIET_QUANTILE)) if len(shares) >= 4 else None


def cpu_share_gates(share: float) -> tuple[bool, str]:
    """Whether a quiet steps' CPU share makes the job CPU-bound enough for its CPU time to gate, and why not."""
    if share < CPU_BOUND_FRAC:
        return False, (f"reported: the step spends {share:.0%} of its wall time on the CPU at its quiet steps (below "
                       f"{CPU_BOUND_FRAC:.0%}): it waits, so the wall clock gates")
    return True, ""


def wait_step(report: Report) -> float | None:
    """The time a step spends not computing at the run's quiet steps: the 5th percentile of each
    measured step's wall time less its CPU time (0 at least). A neighbour lengthens some steps' wait,
    never the quiet ones'; a sleep, I/O or a lock added to every step lengthens them all."""
    waits = [max(0.0, d - c) for c, d in zip(_measured(report, CPU), _measured(report, DURATION))
             if isinstance(c, (int, float)) and isinstance(d, (int, float))]
    return float(np.quantile(waits, FAST_QUANTILE)) if len(waits) >= 4 else None


def wait_grew(base: list[Report], cand: list[Report], threshold: float) -> bool | None:
    """Whether the candidate's steps wait longer at their quiet steps by half the threshold of the
    base's fast step or more (the median over rounds); None where a run lacks the figures."""
    grew = []
    for b, c in zip(base, cand):
        wb, wc, step = wait_step(b), wait_step(c), fast_step(b)
        if wb is None or wc is None or not step:
            return None
        grew.append((wc - wb) / step)
    return bool(float(np.median(grew)) >= threshold / 2) if grew else None


ON_A_GPU = "reported: a GPU job is gated on its step clock (the device's)"


def cpu_bound(reports: list[Report], data: dict) -> tuple[bool, str]:
    """Whether the job is CPU-bound (the CPU time per step can settle the gate), and the figure said;
    `data` is :func:`series`'s, whose figures are the reports' (base then candidate)."""
    if any(r.device != "cpu" for r in reports):
        return False, ON_A_GPU
    shares = [x for x in (busy_share(r) for r in reports) if x is not None]
    if len(shares) < len(reports) or "cpu_time" not in data:
        return False, "reported: some runs have no CPU time per step"
    return cpu_share_gates(float(np.median(shares)))


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


def round_dir(out: Path, side: str, index: int) -> Path:
    """A side's run dir for round (or restart) `index` under the gate's output dir."""
    return out / side / f"round-{index:02d}"


def _profile(cmd: list[str], cwd: Path, env: Mapping[str, str]) -> subprocess.CompletedProcess:
    """Run a round's `advise profile` in a session of its own, advise's stop signals forwarded one
    for one (a terminal's Ctrl-C would otherwise reach it twice: once from the terminal, once from
    here); Interrupted once it has stopped. Giving up (a third signal) kills its whole tree."""
    with deferred() as stop:
        if stop:
            raise Interrupted(stop.signum)
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        sent, err = 0, ""
        with stop.on_give_up(lambda: _kill_tree(proc.pid)):
            while True:
                for signum in stop.received[sent:]:
                    proc.send_signal(signum)
                    sent += 1
                try:
                    err = proc.communicate(timeout=0.1)[1]
                    break
                except subprocess.TimeoutExpired:
                    continue
        if stop:
            raise Interrupted(stop.signum)
    return subprocess.CompletedProcess(cmd, proc.returncode, None, err)


def _kill_tree(pid: int) -> None:
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for p in tree:
        try:
            p.kill()
        except psutil.Error:
            pass


def run_round(side: str, checkout: Path, index: int, options: ABOptions, script: str, args: list[str],
              out: Path, env_of: Mapping[str, str] | None = None) -> Round:
    """One whole `advise profile` of SCRIPT in `checkout`: its typed report (RoundFailed when not ok).
    `env_of`: variables this side's runs set over the environment (a check's PYTHONPATH into its copy)."""
    run_dir = round_dir(out, side, index)
    # The rounds' own summaries stay out of the job's; the job's own OMP_WAIT_POLICY wins over ROUND_ENV's.
    env = {**(ROUND_ENV if options.passive_threads else {}),
           **{k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}, **(env_of or {})}
    started = time.monotonic()
    proc = _profile(_command(options, run_dir, script, args), checkout, env)
    wall = time.monotonic() - started
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
          cpu: tuple[bool, str] | None = None, waits: bool | None = None) -> list[sequential.MetricSpec]:
    """The gate's metrics; `cpu`: (whether the CPU time per step gates, why not) where the runs have it."""
    out = [sequential.MetricSpec("step_time", f"step time (p{FAST_QUANTILE * 100:.0f} of steps)", "s", False,
                                 options.max_regression),
           sequential.MetricSpec("throughput", f"throughput ({unit}, at p{FAST_QUANTILE * 100:.0f} step)", unit, True,
                                 options.max_regression, mirrors="step_time")]
    if cpu is not None:
        gated, why = cpu
        out.append(sequential.MetricSpec("cpu_time", f"CPU time per step (p{FAST_QUANTILE * 100:.0f})", "s", False,
                                         options.max_regression,
                                         settles="step_time", gated=gated, note=why, wait_grew=waits))
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
    return opdiff.between(_traces(base), _traces(cand), "rounds")


def window_steps(pilot: Report, options: ABOptions) -> tuple[int, str]:
    """The rounds' measured steps: enough to fill ``window_s`` at the pilot's fast step (at least
    ``--steps``), and how they were sized, said."""
    step = fast_step(pilot)
    if not step or step <= 0:
        return options.steps, "the pilot run timed no step: --steps alone"
    steps = min(MAX_WINDOW_STEPS, max(options.steps, math.ceil(options.window_s / step)))
    return steps, (f"{steps} steps a run: a {options.window_s:g} s window at the pilot's fast step of {step * 1e3:.1f} ms"
                   + (" (--steps is longer)" if steps == options.steps else ""))


def time_spent(started: float, pilot_s: float, kept: list[float], aside: list[float], stopped: str,
               budget_s: float | None, window: str) -> dict:
    """Where the gate's time went: the pilot, the rounds judged, the rounds set aside, the rest (the decision)."""
    total = time.monotonic() - started
    return clean({"total_s": total, "budget_s": budget_s, "pilot_s": pilot_s, "rounds_s": sum(kept),
                          "rounds": len(kept), "set_aside_s": sum(aside), "set_aside": len(aside),
                          "other_s": max(0.0, total - pilot_s - sum(kept) - sum(aside)),
                          "per_round_s": float(np.median(kept)) if kept else None, "stopped": stopped, "window": window})


def time_line(spent: dict) -> str:
    """:func:`time_spent` in one clause, for the verdict."""
    budget = f" of a {spent['budget_s']:.0f} s budget" if spent.get("budget_s") else ""
    aside = f", {spent['set_aside']} set aside {spent['set_aside_s']:.0f} s" if spent.get("set_aside") else ""
    pilot = f"pilot {spent['pilot_s']:.0f} s, " if spent.get("pilot_s") else ""
    return (f"time {spent['total_s']:.0f} s{budget}: {pilot}{spent['rounds']} rounds {spent['rounds_s']:.0f} s"
            f"{aside}; stopped by {spent['stopped']}; {spent['window']}")


@dataclass
class _Gate:
    """A sequential gate's rounds so far: those judged, those set aside, what each took."""

    options: ABOptions
    out: Path
    started: float
    plan: list[int]
    base: list[Round] = field(default_factory=list)
    cand: list[Round] = field(default_factory=list)
    runs: list[dict] = field(default_factory=list)
    history: list[dict] = field(default_factory=list)
    kept_s: list[float] = field(default_factory=list)
    aside_s: list[float] = field(default_factory=list)
    set_aside: list[dict] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    pilot_s: float = 0.0

    def out_of_time(self) -> bool:
        budget = self.options.time_budget_s
        elapsed = time.monotonic() - self.started
        return budget is not None and len(self.base) >= 2 and elapsed + next_round_s(self.kept_s + self.aside_s,
                                                                                    self.pilot_s) > budget

    def pair(self, index: int, current: ABOptions, sides: Mapping[str, tuple[Path, list[str], Mapping[str, str] | None]],
             script: str, on_run: Callable[[str, int, Report], None] | None) -> dict[str, Round]:
        """Round `index`: one run of each side, B C on even rounds kept and C B on odd ones."""
        pair: dict[str, Round] = {}
        order = ["base", "candidate"] if len(self.base) % 2 == 0 else ["candidate", "base"]
        for side in order:
            root, args, env = sides[side]
            done = run_round(side, root, index, current, script, args, self.out, env)
            pair[side] = done
            load = neighbour.load(done.run_dir, done.report.env.cpu_count)
            self.runs.append({"side": side, "round": index, "run_dir": os.path.relpath(done.run_dir, self.out),
                              "steps": current.steps, "wall_s": done.wall_s, "neighbour_cores": load,
                              **_figures(done.report)})
            if on_run is not None:
                on_run(side, index, done.report)
        return pair

    def keep_or_set_aside(self, index: int, pair: dict[str, Round], took: float, steps: int) -> bool:
        """Keep the round, or set it aside where a neighbour took the machine (only while the budget
        can pay for a replacement and still reach the first look: on a runner this busy all the time,
        setting rounds aside would spend the budget on nothing). True when kept."""
        why = neighbour.too_busy([r["neighbour_cores"] for r in self.runs[-2:]], pair["base"].report.env.cpu_count,
                                 len(self.set_aside))
        to_first_look = max(1, self.plan[0] - len(self.base))
        budget = self.options.time_budget_s
        affordable = budget is None or (time.monotonic() - self.started + next_round_s(self.kept_s + self.aside_s + [took],
                                                                                      self.pilot_s) * to_first_look <= budget)
        if why and affordable:
            self.set_aside.append({"round": index, "why": why})
            self.aside_s.append(took)
            for r in self.runs[-2:]:
                r["set_aside"] = True
            return False
        self.base.append(pair["base"])
        self.cand.append(pair["candidate"])
        self.kept_s.append(took)
        self.lengths.append(steps)
        return True

    def look(self, steps: int, last: bool = False) -> sequential.Decision:
        return _look(self.base, self.cand, self.options, self.plan, self.lengths, self.history, steps, last=last)


def run_ab(base_dir: str, candidate_dir: str, script: str, args: list[str], options: ABOptions, out: Path,
           on_run: Callable[[str, int, Report], None] | None = None,
           env_of: Mapping[str, Mapping[str, str]] | None = None,
           args_of: Mapping[str, list[str]] | None = None) -> ABResult:
    """Profile SCRIPT in both checkouts in interleaved rounds until the sequential decision is final
    (`env_of`, `args_of`: each side's own variables and script arguments, by "base" and "candidate":
    a flag fix changes only the candidate's command)."""
    roots = checkouts(base_dir, candidate_dir, script, options.module)
    # The rounds run in the checkouts: their run dirs must not follow them there.
    gate = _Gate(options, Path(out).resolve(), time.monotonic(), sequential.looks(options.rounds, options.max_rounds))
    sides = {side: (roots[side], (args_of or {}).get(side, args), (env_of or {}).get(side)) for side in roots}
    current, window = options, f"{options.steps} steps a run (--steps; no window)"
    if options.window_s > 0:  # the pilot: base/round-00, timed and not judged (it also warms the caches)
        pilot = run_round("base", roots["base"], 0, options, script, sides["base"][1], gate.out, sides["base"][2])
        gate.pilot_s = pilot.wall_s
        steps, window = window_steps(pilot.report, options)
        current = ABOptions(**{**asdict(options), "steps": steps})
    decision, stopped, index = None, "max-rounds", 0
    while len(gate.base) < gate.plan[-1]:
        if gate.out_of_time():
            stopped = "the time budget"
            break
        index += 1
        round_started = time.monotonic()
        pair = gate.pair(index, current, sides, script, on_run)
        if not gate.keep_or_set_aside(index, pair, time.monotonic() - round_started, current.steps) \
                or len(gate.base) not in gate.plan:
            continue
        decision = gate.look(current.steps)
        if decision.final:
            stopped = "the verdict" if decision.verdict != sequential.INCONCLUSIVE else "max-rounds"
            break
    if decision is None or not decision.final:  # the budget (or max-rounds) ends the gate between looks: its last look
        if len(gate.base) < 2:
            raise ABError(f"the time budget ({options.time_budget_s:g} s) ended before two rounds: raise --time-budget")
        decision = gate.look(current.steps, last=True)
    return _sequential_result(gate, decision, stopped, window, base_dir, candidate_dir, script)


def _sequential_result(gate: _Gate, decision: sequential.Decision, stopped: str, window: str, base_dir: str,
                       candidate_dir: str, script: str) -> ABResult:
    decision.history = gate.history
    spent = time_spent(gate.started, gate.pilot_s, gate.kept_s, gate.aside_s, stopped, gate.options.time_budget_s, window)
    decision.rule = f"{decision.decided_by()}. {time_line(spent)}. {decision.rule}"
    warnings = [d.text() for d in fingerprint.differences(gate.base[0].report, gate.cand[0].report)]
    warnings += [f"round {a['round']} set aside and replaced: {a['why']}" for a in gate.set_aside]
    warnings += longer_budget(decision, spent)
    result = ABResult(str(base_dir), str(candidate_dir), script, decision, gate.runs, warnings,
                      wall_s=time.monotonic() - gate.started, inconclusive_policy=gate.options.inconclusive, time=spent,
                      set_aside=gate.set_aside)
    if result.failed or gate.options.ops:
        result.slower_ops, result.ops_note = where_the_time_went(gate.base, gate.cand)
    return result


def longer_budget(decision: sequential.Decision, spent: dict) -> list[str]:
    """For each metric left inconclusive: the rounds (and seconds) that would rule its threshold out
    were its estimate and spread to hold, or that none would: what a longer budget buys here."""
    lines = []
    per_round = spent.get("per_round_s") or 0.0
    for m in decision.inconclusive:
        if m.rounds_needed is None:
            lines.append(f"{m.label}: more rounds would not rule a {m.threshold:.0%} slowdown out ({m.slowdown:+.1%} "
                         f"so far is {'beyond' if m.slowdown >= m.threshold else 'too near'} it)" if m.slowdown is not None else
                         f"{m.label}: too few rounds to say what more would buy")
            continue
        seconds = math.ceil(per_round * m.rounds_needed + (spent.get("pilot_s") or 0.0)) if per_round else None
        budget = f" (about {seconds} s: --time-budget {seconds} --max-rounds {m.rounds_needed})" if seconds else \
            f" (--max-rounds {m.rounds_needed})"
        lines.append(f"{m.label}: at this runner's spread between rounds, about {m.rounds_needed} rounds would rule a "
                     f"{m.threshold:.0%} slowdown out were its {m.slowdown:+.1%} to hold{budget}")
    return lines


def next_round_s(took: list[float], pilot_s: float) -> float:
    """What the next round is expected to take: the slowest of the last three (twice the pilot before any)."""
    return max(took[-3:]) if took else 2 * pilot_s


def _look(base: list[Round], cand: list[Round], options: ABOptions, plan: list[int], lengths: list[int],
          history: list[dict], steps: int, last: bool = False) -> sequential.Decision:
    """The decision over the rounds kept so far, noted in `history`."""
    data, unit, memory_label = series([r.report for r in base], [r.report for r in cand])
    cpu = cpu_bound([r.report for r in base + cand], data) if "cpu_time" in data else None
    waits = wait_grew([r.report for r in base], [r.report for r in cand], options.max_regression)
    decision = sequential.decide(data, specs(options, unit, memory_label, cpu, waits), alpha=options.alpha, plan=plan,
                                 lengths=lengths, last=last)
    history.append({"rounds": len(base), "look": decision.look, "final": decision.final, "steps": steps,
                    "slowdowns": {m.name: m.slowdown for m in decision.metrics},
                    "upper": {m.name: m.upper for m in decision.metrics},
                    "p_values": {m.name: m.p_value for m in decision.metrics},
                    "regressions": [m.name for m in decision.regressions]})
    return decision
