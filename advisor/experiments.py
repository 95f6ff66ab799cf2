"""Re-run the script with each automatic fix injected and measure the real speedup.

Each experiment is a fresh child run of the same probe (no profiler, so every step is
clean) with one Fix's override. Noise is handled, not ignored: the baseline is re-measured
between candidates (B C1 B C2 B ...), and each candidate is compared with the baseline runs
on either side of it. The speedup is a throughput ratio (samples/s, so a bigger batch is
judged fairly) with a bootstrap confidence interval over per-step times; a fix is
``verified`` only when the whole interval lies above 1. Fixes that change numerics must
also keep the loss finite and close to the baseline's.

Where the best value is not knowable in advance (DataLoader workers, batch size) the
experiment sweeps it, stopping as soon as a step up stops paying. The winners are then
stacked into one recommended configuration and measured together against the baseline.
"""

from __future__ import annotations

import copy
import math
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from . import metrics
from .probe.runner import ProbeConfig, run_probe
from .profile import Profile
from .snippets import describe, snippet_for
from .stats import baseline_drift, speedup_ci

MIN_GAIN = 0.05        # a sweep step must add 5% over the best so far to go on
MIN_EFFECT = 0.03      # verified needs the interval's low end above 1 + max(3%, baseline drift)
LOSS_REL_TOL = 0.10    # numerics: mean loss within 10% of the baseline's ...
LOSS_SEM_K = 3.0       # ... or within 3 standard errors, whichever is wider


@dataclass
class Candidate:
    """One override to measure, and the finding it answers (None for the stacked run)."""

    label: str
    overrides: dict
    applicability: str = "safe"
    finding_index: int | None = None


@dataclass
class Measurement:
    label: str
    overrides: dict
    status: str
    run_dir: Path
    steps: pd.DataFrame
    wall_s: float
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok" and not self.steps.empty



@dataclass
class Budget:
    """Stops experiments when the count or the time runs out; says why."""

    max_experiments: int
    time_budget_s: float
    started: float = field(default_factory=time.monotonic)
    used: int = 0

    def allows(self, runs_needed: int, per_run_s: float) -> bool:
        return self.used < self.max_experiments and self.has_time(runs_needed, per_run_s)

    def has_time(self, runs_needed: int, per_run_s: float) -> bool:
        return time.monotonic() - self.started + runs_needed * per_run_s <= self.time_budget_s


class Progress:
    """Names the experiment running and how many remain (terminal renderer plugs in here)."""

    def experiment(self, label: str, index: int, total: int) -> None:  # pragma: no cover - UI
        pass

    def update(self, phase: str, done: int, total: int) -> None:  # pragma: no cover - UI
        pass


# statistics ---------------------------------------------------------------------------------

def loss_check(baseline: list[pd.DataFrame], candidate: pd.DataFrame) -> dict:
    """Finite and close: the candidate's mean loss within tolerance of the baseline's."""
    b = pd.concat([f["loss"] for f in baseline if "loss" in f]).dropna().to_numpy(float) if baseline else np.array([])
    c = candidate["loss"].dropna().to_numpy(float) if "loss" in candidate else np.array([])
    flags = candidate["loss_finite"].dropna() if "loss_finite" in candidate else pd.Series(dtype=bool)
    if len(flags) and not flags.astype(bool).all():
        return {"checked": True, "finite": False, "passed": False, "rule": "the loss must stay finite"}
    if len(b) < 2 or len(c) < 2:
        return {"checked": False, "reason": "loss not visible to the probe", "passed": None}
    finite = bool(np.isfinite(c).all())
    b_mean, c_mean = float(b.mean()), float(c[np.isfinite(c)].mean()) if finite else float("nan")
    sem = math.sqrt(b.var(ddof=1) / len(b) + c.var(ddof=1) / len(c)) if finite else float("nan")
    tol = max(LOSS_REL_TOL * abs(b_mean), LOSS_SEM_K * sem) if finite else float("nan")
    passed = finite and abs(c_mean - b_mean) <= tol
    return {"checked": True, "finite": finite, "baseline_mean": b_mean, "candidate_mean": c_mean,
            "tolerance": tol, "rule": f"finite, and |mean difference| <= max({LOSS_REL_TOL:.0%} of baseline, {LOSS_SEM_K:g} SE)",
            "passed": bool(passed)}


# running ------------------------------------------------------------------------------------

def _slug(label: str) -> str:
    keep = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in label.lower())
    return "-".join(filter(None, keep.split("-")))[:60]


class Runner:
    """Runs probe children for the experiments and keeps their run dirs under `root`."""

    def __init__(self, base: ProbeConfig, root: Path, progress: Progress | None, budget: Budget):
        self.base = base
        self.root = root
        self.progress = progress or Progress()
        self.budget = budget
        self.counter = 0
        self.per_run_s = 0.0
        self.log: list[dict] = []  # every child run: label, status, wall_s, run_dir

    def measure(self, label: str, overrides: dict) -> Measurement:
        self.counter += 1
        run_dir = self.root / f"{self.counter:02d}-{_slug(label) or 'baseline'}"
        config = replace(self.base, out=run_dir, overrides=overrides, profile_steps=0)
        run = run_probe(config, self.progress)
        if run.status == "interrupted":  # Ctrl-C stops the experiments, not just this run
            raise KeyboardInterrupt
        profile = Profile.from_run_dir(run_dir)
        self.per_run_s = max(self.per_run_s, run.wall_s)
        self.log.append({"label": label, "overrides": overrides, "status": run.status, "wall_s": run.wall_s,
                         "run_dir": str(run_dir)})
        return Measurement(label, overrides, run.status, run_dir, profile.steps, run.wall_s, run.probe.get("error"))


def merge_overrides(*items: dict) -> dict:
    """Deep-merge overrides (dataloader dicts combine)."""
    out: dict = {}
    for item in items:
        for key, value in item.items():
            if isinstance(value, dict):
                out[key] = {**out.get(key, {}), **value}
            else:
                out[key] = value
    return out


def _ladder(candidate: Candidate, cpu_count: int, io_like: bool) -> list[Candidate]:
    """The values to sweep for knobs whose best value can't be known in advance."""
    overrides = candidate.overrides
    if "num_workers" in overrides.get("dataloader", {}):
        cap = min(32, cpu_count * (4 if io_like else 1))
        values = sorted({v for v in (2, 4, 8, 16, 32) if v <= max(cap, 2)} | {overrides["dataloader"]["num_workers"]})
        values = [v for v in values if v <= max(cap, 2)]
        return [Candidate(f"{candidate.label} (num_workers={v})",
                          merge_overrides(overrides, {"dataloader": {"num_workers": v}}),
                          candidate.applicability, candidate.finding_index) for v in values]
    if "batch_size_scale" in overrides:
        return [Candidate(f"{candidate.label} (batch x{k})", {**overrides, "batch_size_scale": k},
                          candidate.applicability, candidate.finding_index) for k in (2, 4, 8)]
    return [candidate]


def _compare(base_runs: list[Measurement], cand_runs: list[Measurement] | Measurement, *, by_samples: bool,
             check_loss: bool) -> dict:
    """Judge candidate run(s) against the baseline runs measured around them."""
    cand_runs = [cand_runs] if isinstance(cand_runs, Measurement) else cand_runs
    ok_base = [m.steps for m in base_runs if m.ok]
    ok_cand = [m for m in cand_runs if m.ok]
    result = {"verified": False, "speedup": None, "ci_low": None, "ci_high": None,
              "baseline": _pool_summary(base_runs), "candidate": _pool_summary(cand_runs), "overrides": cand_runs[0].overrides,
              "loss_check": None, "verdict": "failed", "estimate": False}
    if len(ok_cand) < len(cand_runs) or not ok_base:
        failed = next((m for m in cand_runs if not m.ok), None)
        result["error"] = (failed.error if failed else None) or "the baseline could not be re-measured"
        return result
    ratio, lo, hi = speedup_ci(ok_base, [m.steps for m in ok_cand], by_samples=by_samples)
    drift = baseline_drift(ok_base, by_samples)
    result.update(speedup=ratio, ci_low=lo, ci_high=hi, baseline_drift_frac=drift)
    if check_loss:
        result["loss_check"] = loss_check(ok_base, pd.concat([m.steps for m in ok_cand], ignore_index=True))
    loss_ok = not check_loss or result["loss_check"]["passed"] is not False
    if lo > 1.0 + max(MIN_EFFECT, drift) and loss_ok:
        result.update(verified=True, verdict="faster")
    elif hi < 1.0 - max(MIN_EFFECT, drift):
        result["verdict"] = "slower"
    elif not loss_ok:
        result["verdict"] = "loss-changed"
    else:
        result["verdict"] = "no-significant-change"
    return result


def _confirm(runner: "Runner", label: str, first: dict, first_runs: tuple[list, list], baselines: list[Measurement],
             *, by_samples: bool, check_loss: bool, notes: list[str]) -> dict:
    """Measure an apparent winner once more (C B) before calling it verified.

    One lucky run pair on a shared machine can look faster; a fix is verified only when a
    second pair agrees and the pooled interval (all four baselines) still clears the bar.
    """
    if not runner.budget.has_time(2, runner.per_run_s):
        notes.append(f"no time to confirm '{label}': it rests on one candidate run")
        return first
    before = baselines[-1]
    runner.progress.experiment(f"{label}: confirming with a second run", 1, 1)
    cand = runner.measure(label + " (confirmation)", first["overrides"])
    runner.progress.experiment("re-measuring the baseline", 1, 1)
    after = runner.measure("baseline", {})
    baselines.append(after)
    second = _compare([before, after], cand, by_samples=by_samples, check_loss=check_loss)
    base_runs = [m for i, m in enumerate(first_runs[0] + [before, after])
                 if not any(m is other for other in (first_runs[0] + [before])[:i])]
    pooled = _compare(base_runs, first_runs[1] + [cand], by_samples=by_samples, check_loss=check_loss)
    pooled["runs"] = [{"speedup": r["speedup"], "ci_low": r["ci_low"], "ci_high": r["ci_high"]} for r in (first, second)]
    if pooled["verified"] and not second["verified"]:
        pooled.update(verified=False, verdict="not-confirmed")
    return pooled


def _pool_summary(runs: list[Measurement]) -> dict:
    ok = [m for m in runs if m.ok]
    if not ok:
        return {"runs": len(runs), "samples_per_s": None}
    steps = pd.concat([m.steps for m in ok], ignore_index=True)
    tp = metrics.throughput(steps)
    return {"runs": len(ok), "samples_per_s": tp["samples_per_s"], "steps_per_s": tp["steps_per_s"],
            "step_time_median_s": tp["step_time_median_s"], "run_dirs": [str(m.run_dir) for m in ok]}


def _better(a: dict | None, b: dict) -> bool:
    """Does sweep point `b` beat the best so far `a` by a real margin?"""
    if b.get("speedup") is None or not b.get("verified"):
        return False
    return a is None or b["speedup"] >= a["speedup"] * (1 + MIN_GAIN)


def candidates_from(findings: list[dict], safe_only: bool) -> list[Candidate]:
    """One candidate per distinct automatic fix; unsafe ones only when allowed."""
    out, seen = [], set()
    for i, finding in enumerate(findings):
        fix = finding.get("fix") or {}
        overrides = fix.get("overrides")
        if fix.get("kind") != "automatic" or not overrides:
            continue
        applicability = fix.get("applicability", "safe")
        if safe_only and applicability != "safe":
            continue
        key = repr(sorted(overrides.items()))
        if key in seen:
            continue
        seen.add(key)
        out.append(Candidate(finding.get("rule", f"fix {i}"), overrides, applicability, i))
    return out


@dataclass
class ExperimentResults:
    """Findings with `experiment` filled, the stacked recommendation, and every child run."""

    findings: list[dict]
    recommended: dict | None
    notes: list[str]
    runs: list[dict]

    def summary(self) -> dict:
        """report.json's `experiments` block: what was run and what it cost."""
        return {"runs": self.runs, "n_runs": len(self.runs), "child_wall_s": sum(r["wall_s"] for r in self.runs)}


def run_experiments(findings: list[dict], base: ProbeConfig, baseline_steps: pd.DataFrame, *, root: Path,
                    env: dict, io_like: bool = False, safe_only: bool = False, max_experiments: int = 12,
                    time_budget_s: float = 900.0, progress: Progress | None = None) -> ExperimentResults:
    """Measure every automatic fix, sweep the knobs that need it, then stack the winners."""
    findings = copy.deepcopy(findings)
    notes: list[str] = []
    candidates = candidates_from(findings, safe_only)
    if not candidates:
        return ExperimentResults(findings, None, notes, [])
    budget = Budget(max_experiments, time_budget_s)
    runner = Runner(base, root, progress, budget)
    by_samples = bool(baseline_steps["samples"].notna().all()) if "samples" in baseline_steps and len(baseline_steps) else False
    runner.progress.experiment("measuring the baseline without the profiler", 0, len(candidates))
    baselines = [runner.measure("baseline", {})]
    cpu_count = int(env.get("cpu_count") or os.cpu_count() or 1)
    winners: list[tuple[Candidate, dict]] = []
    planned = sum(len(_ladder(c, cpu_count, io_like)) for c in candidates)
    done = 0

    for candidate in candidates:
        finding = findings[candidate.finding_index]
        changes_batch = "batch_size_scale" in candidate.overrides
        if changes_batch and not by_samples:
            finding["experiment"] = {"verified": False, "verdict": "not-measured", "estimate": True,
                                     "reason": "the batch size is unknown, so samples/s cannot be compared"}
            continue
        check_loss = candidate.applicability != "safe"
        best, sweep, runs_of = None, [], {}
        for point in _ladder(candidate, cpu_count, io_like):
            if not budget.allows(2, runner.per_run_s):
                notes.append(f"experiment budget reached before '{point.label}'")
                break
            done += 1
            runner.progress.experiment(f"{point.label} ({done} of at most {planned})", done, planned)
            cand = runner.measure(point.label, point.overrides)
            runner.progress.experiment("re-measuring the baseline", done, planned)
            baselines.append(runner.measure("baseline", {}))
            budget.used += 1
            result = _compare(baselines[-2:], cand, by_samples=by_samples, check_loss=check_loss)
            runs_of[id(result)] = (baselines[-2:], [cand])
            sweep.append({"label": point.label, "overrides": point.overrides, "speedup": result["speedup"],
                          "ci_low": result["ci_low"], "ci_high": result["ci_high"], "verdict": result["verdict"]})
            if _better(best, result):
                best = result
            elif len(sweep) > 1:
                break  # a step up stopped paying: stop the sweep early
            if result["verdict"] == "failed" and changes_batch:
                break  # e.g. out of memory: larger values will fail too
        if not sweep:
            finding["experiment"] = {"verified": False, "verdict": "not-measured", "estimate": True,
                                     "reason": "experiment budget exhausted"}
            continue
        if best is not None:
            best = _confirm(runner, candidate.label, best, runs_of[id(best)], baselines, by_samples=by_samples,
                            check_loss=check_loss, notes=notes)
            if not best["verified"]:
                finding["experiment"] = {**best, "sweep": sweep if len(sweep) > 1 else None,
                                         "applicability": candidate.applicability}
                continue
        chosen = best or _summarise_unverified(sweep, baselines)
        chosen["sweep"] = sweep if len(sweep) > 1 else None
        chosen["applicability"] = candidate.applicability
        finding["experiment"] = chosen
        if best is not None:
            winners.append((candidate, best))
            _adopt_measured_best(finding, best["overrides"])

    recommended = _stack(winners, runner, baselines, by_samples, budget, notes) if winners else None
    return ExperimentResults(findings, recommended, notes, runner.log)


def _adopt_measured_best(finding: dict, overrides: dict) -> None:
    """A sweep beat the rule's proposal: the fix becomes what was measured, the proposal is kept.

    The rule's snippet shows its own guess (say 1 worker); a user copying it should get the
    value that was verified (say 8), so the snippet is rebuilt from the measured override.
    """
    fix = finding["fix"]
    if overrides == fix.get("overrides"):
        return
    fix["proposed_overrides"] = fix.get("overrides")
    fix["overrides"] = overrides
    fix["snippet"] = "\n".join(snippet_for(key, value)["snippet"] for key, value in overrides.items())
    fix["title"] = f"{fix.get('title', 'Apply the fix')} (measured best: {describe(overrides)})"


def _summarise_unverified(sweep: list[dict], baselines: list[Measurement]) -> dict:
    """No sweep point was verified faster: report the first honestly (slower or no change)."""
    first = sweep[0]
    return {"verified": False, "speedup": first["speedup"], "ci_low": first["ci_low"], "ci_high": first["ci_high"],
            "overrides": first["overrides"], "verdict": first["verdict"], "estimate": False,
            "baseline": _pool_summary(baselines)}


def _stack(winners, runner: Runner, baselines, by_samples, budget: Budget, notes) -> dict:
    overrides = merge_overrides(*(result["overrides"] for _, result in winners))
    labels = [candidate.label for candidate, _ in winners]
    unsafe = any(candidate.applicability != "safe" for candidate, _ in winners)
    if len(winners) == 1:
        result = dict(winners[0][1])
    elif budget.allows(2, runner.per_run_s):
        runner.progress.experiment("all winners stacked: " + " + ".join(labels), 1, 1)
        cand = runner.measure("stacked", overrides)
        runner.progress.experiment("re-measuring the baseline", 1, 1)
        baselines.append(runner.measure("baseline", {}))
        result = _compare(baselines[-2:], cand, by_samples=by_samples, check_loss=unsafe)
    else:
        notes.append("no time left to measure the stacked configuration; best single fix recommended")
        candidate, result = max(winners, key=lambda w: w[1]["speedup"])
        overrides, labels = result["overrides"], [candidate.label]
    return {"fixes": labels, "overrides": overrides, "speedup": result.get("speedup"), "ci_low": result.get("ci_low"),
            "ci_high": result.get("ci_high"), "verified": bool(result.get("verified")),
            "loss_check": result.get("loss_check"), "applicability": "unsafe" if unsafe else "safe",
            "baseline": result.get("baseline"), "candidate": result.get("candidate"),
            "snippets": [snippet_for(key, value) for key, value in overrides.items()]}
