"""The fixes measured for `advise profile`: the arms of the profiled run (the rules run on its live
window, :class:`~advisor.experiments.inprocess.ArmsSession` judges what the child measured), fresh
runs of the script for what no arm could switch, --confirm's fresh runs of the recommendation,
the recommendation's patch, then the findings' severity and order."""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..framework import words as framework_words
from ..analysis import metrics, stats, steptime
from ..apply import Files, command_for, patch_for
from ..apply.script_steps import read as read_script_steps
from ..experiments.fresh import confirm_recommendation, run_experiments
from ..experiments.inprocess import ArmsSession
from ..experiments.judge import ExperimentResults
from ..experiments.sizing import pacing_workers, script_workers
from ..job import report as job_report
from ..job.link import JobLink
from ..model import rank, settle_severity, split_screened
from ..probe.config import AUTO_BUDGET_MAX_S
from ..probe.runner import ProbeConfig, job_suffix
from ..profile import Profile
from ..run_dir import layout
from ..run_dir.interrupt import StopRequest
from . import outputs

if TYPE_CHECKING:
    from ..engine import Settings
    from ..experiments.fresh import ExperimentProgress
    from ..model import Finding, Patch, Recommendation
    from ..probe.runner import ProbeRun


@dataclass
class ExperimentOptions:
    """--no-experiments / --max-experiments / --time-budget / --safe-only / --fresh-runs."""

    enabled: bool = True
    max_experiments: int = 12
    time_budget_s: float | None = None  # None: auto (advisor.probe.config.auto_arms_budget)
    safe_only: bool = False
    fresh_runs: bool = False  # measure every fix in a re-run of the script, not as arms of the profiled run
    confirm: bool = False  # also measure the in-process recommendation in fresh runs (B R B R B)

    @property
    def fresh_budget_s(self) -> float:
        """--fresh-runs' time: each fix costs whole runs of the script, so no automatic budget
        (a multiple of one run) could measure any; 900 s unless one was given."""
        return self.time_budget_s if self.time_budget_s is not None else 900.0


def _io_like(profile: Profile) -> bool:
    """The profiled window's loading waits rather than computes (:func:`metrics.io_bound`, with the
    script's loader workers): the worker ladder may go past the cores. On the Profile diagnose()
    loaded: the trace is parsed once."""
    return bool(metrics.io_bound(profile.samples, profile.steps, profile.env.cpu_count or 1, script_workers(profile.observed)))


def arms_session(config: ProbeConfig, experiments: ExperimentOptions, rule_settings: Settings | None, link: JobLink | None = None,
                  stop: StopRequest | None = None) -> ArmsSession:
    """The parent's side of the in-process experiments: the rules run on the live window's Profile.

    `link`: rank 0 of a job a launcher started: the plan goes to every rank, and the rules read
    every rank's window (their summaries, :func:`_merge_windows`)."""
    out, suffix = Path(config.out), job_suffix(config)  # a launched job: rank 0's window and arms are judged
    session: ArmsSession

    # the window of the rank whose steps are judged (the runner names it: rank 0's in a job)
    def diagnose() -> tuple[list[Finding], Profile]:
        profile = Profile.from_run_dir(out, session.rank_suffix)
        if link is not None:
            session.notes.extend(job_report.merge_windows(profile, link, stop))
        elif len(session.plan_suffixes) > 1:  # ranks advise (or the script) started: their windows are in the run dir
            session.notes.extend(job_report.read_windows(profile, out, session.plan_suffixes[1:], stop))
        if len(session.plan_suffixes) > 1:  # the job's ranks share this node's cores (spawned ranks do not say so)
            profile.env.local_world_size = profile.env.local_world_size or len(session.plan_suffixes)
        findings, warnings = outputs.diagnose(profile, rule_settings, screen=True)
        session.rule_warnings = warnings
        if link is None and len(session.plan_suffixes) <= 1:  # a job's other ranks are outside this process tree
            session.cpu_count = profile.env.cpu_count
        return findings, profile

    stats.preload()  # the arms' first judgement needs it, and the script is starting up
    session = ArmsSession(out, suffix, diagnose, safe_only=experiments.safe_only,
                          max_experiments=experiments.max_experiments, window_steps=max(5, config.steps // 2),
                          budget_from=lambda: config.arms_budget_s,
                          io_like=_io_like, publish=link.publish_plan if link is not None else None)
    return session


def _combine(first: ExperimentResults | None, fresh: ExperimentResults) -> ExperimentResults:
    """In-process results with the fresh runs of the fixes that could not be switched live."""
    if first is None:
        return fresh
    recommended = max((r for r in (first.recommended, fresh.recommended) if r is not None),
                      key=lambda r: r.speedup or 0.0, default=None)
    notes = first.notes + fresh.notes
    if first.recommended is not None and fresh.recommended is not None:
        notes.append("fixes measured in-process and in fresh runs were not stacked together; the faster is recommended")
    return ExperimentResults(fresh.findings, recommended, notes, fresh.runs, fresh.interrupted)


def measure_fixes(session: ArmsSession | None, run: ProbeRun, profile: Profile, merged: dict | None, link: JobLink | None,
                  config: ProbeConfig, experiments: ExperimentOptions, rule_settings: Settings | None, out: Path,
                  progress: ExperimentProgress, stop: StopRequest) -> tuple[list[Finding], list[str], ExperimentResults | None]:
    """The findings and what the experiments measured of them: the arms of the profiled run
    (judged by `session`), fresh runs for what they could not switch, then severity and order.
    Returns (findings, rule warnings, ExperimentResults or None)."""
    results = None
    if session is not None and session.findings:  # the rules ran on the live window; arms measured in it
        findings, rule_warnings = session.findings, session.rule_warnings
        session.finish(run.arms, run.budget_ended, run.probe.arms_error)
        if link is None and not run.ranks:  # a job's other ranks are outside each rank's process tree
            session.withhold_if_busy(profile.samples, profile.env.cpu_count,
                                     metrics.contention_warning(profile.steps, profile.samples, profile.env.cpu_count))
        session.add_energy(profile.samples)
        results = ExperimentResults(findings, session.recommended, session.notes, [])
        _account(results, session, config, experiments)
    else:
        findings, rule_warnings = outputs.diagnose(profile, rule_settings)
    # A session that never saw a window (the script's ranks, spawned by itself, ran the steps): fresh runs of the job.
    fresh = session.fresh if session is not None and session.findings else None
    if link is not None:
        job_report.no_fresh_runs(findings, fresh)
    elif run.status == "ok" and experiments.enabled and findings and not stop and (fresh is None or fresh):
        try:
            fresh_results = run_experiments(
                findings, config, profile.steps, root=layout.make_subdir(out, layout.EXPERIMENTS), env=profile.env,
                io_like=_io_like(profile),
                safe_only=experiments.safe_only, max_experiments=experiments.max_experiments,
                time_budget_s=_fresh_time(session, experiments),
                progress=progress, stop=stop,
                only=[c.finding_index for c in fresh] if fresh is not None else None,
                workers=script_workers(profile.observed), pacing=pacing_workers(profile),
            )
            results = _combine(results, fresh_results)
        except KeyboardInterrupt:
            rule_warnings.append("experiments interrupted (Ctrl-C): findings are unmeasured estimates")
        except Exception as exc:  # noqa: BLE001 - the experiments run the user's script: anything; the diagnosis still stands
            rule_warnings.append(f"experiments failed: {type(exc).__name__}: {exc}")
    if merged is not None:
        job_report.settle_disagreements(results, merged["disagree"], rule_warnings)
    if results is not None and experiments.confirm and not stop and link is None:
        _confirm(results, config, profile, out, progress, stop)
    files = Files()  # the user's files, parsed once for the recommendation's patch and every fix's flags
    if results is not None and results.recommended is not None:  # in the framework's words, as the findings
        results.recommended.snippets = framework_words.snippets(results.recommended.overrides,
                                                           profile.observed.framework)
        results.recommended.patch = _patch(results.recommended, profile, config, rule_warnings, files)
    _said_as_flags(results.findings if results is not None else findings, profile, config, files)
    if results is not None:
        _script_steps(results, profile, config)
        findings, screened = split_screened([settle_severity(f) for f in results.findings])
        findings = rank(findings)
        results.screened = screened
    return findings, rule_warnings, results


def _said_as_flags(findings: list[Finding], profile: Profile, config: ProbeConfig, files: Files) -> None:
    """Each automatic fix whose values come from the script's own flags said as those flags first
    (`Fix.flags`), as `advise apply` reads them: "run it with --dtype=bfloat16"."""
    for finding in findings:
        fix = finding.fix
        if not fix.automatic or not fix.overrides:
            continue
        try:
            patched = patch_for(fix.overrides, profile.observed, profile.sources, _as_typed(config), argv=config.args,
                                files=files)
        except Exception:  # noqa: BLE001 - the advice stands without its flags
            continue
        flags = [f for part in patched.patch.parts for f in part.flags]
        if flags and patched.patch.run_with:
            fix.flags, fix.with_code = flags, bool(patched.changed)


def _script_steps(results: ExperimentResults, profile: Profile, config: ProbeConfig) -> None:
    """Beside each compile result's payback, the steps the script runs as it was launched (its
    arguments, its config), where they say: whether this run would pay the compilation back."""
    paid = [f.experiment for f in results.findings if f.experiment is not None and f.experiment.payoff_steps]
    if not paid:
        return
    main = profile.sources.main if profile.sources is not None else None
    samples = float(steptime.batch_sizes(profile.steps).median()) if steptime.knows_batch(profile.steps) else None
    known = read_script_steps(main or (None if config.module else config.script), config.args, profile.observed,
                              profile.sources, samples, profile.env.world_size)
    if known is None:
        return
    for exp in paid:
        exp.script_steps, exp.script_steps_said = known.steps, known.said


def _fresh_time(session: ArmsSession | None, experiments: ExperimentOptions) -> float:
    """The fresh runs' time: with arms, what their budget left, but a fix no arm could switch gets
    the automatic budget's cap at least when none was given (each fresh run restarts the script, so
    what an automatic budget leaves could not measure one); without arms, --fresh-runs' own."""
    if session is None:
        return experiments.fresh_budget_s
    left = session.time_left()
    return left if experiments.time_budget_s is not None else max(left, AUTO_BUDGET_MAX_S)


def _account(results: ExperimentResults, session: ArmsSession, config: ProbeConfig, experiments: ExperimentOptions) -> None:
    """Where the arms' time went, and each fix the budget left without a verdict (not started, or cut
    while it leaned faster) with the one command that measures it: its rule alone, with the time
    its fixes here are predicted to need, twice over for both passes."""
    results.budget_s, results.budget_given = session.time_budget_s, experiments.time_budget_s is not None
    results.window_again_s, results.disturbed_s, results.held_s = session.window_again_s, session.disturbed_s, session.held_s
    if session.rounds is None:
        return
    spend = session.rounds.spend
    results.arms, results.between_steps_s, results.cut_window_s = spend.costs(), spend.between_steps_s(), spend.cut_window_s()
    target = (["-m", config.script] if config.module else [config.script]) + list(config.args)
    undecided = session.rounds.undecided()
    left = [(f, cost, None) for f, cost in session.rounds.spend.left_out_fixes()] + \
        [(f, cost, f.experiment) for f, cost in undecided]
    per_rule: dict[str, float] = {}
    for finding, cost, _ in left:
        per_rule[finding.code or finding.rule] = per_rule.get(finding.code or finding.rule, 0.0) + cost.seconds
    for finding, cost, exp in left:
        code = finding.code or finding.rule
        budget = int(math.ceil((2 * per_rule[code] + 20) / 10) * 10)
        command = shlex.join(["advise", "profile", "--select", code, "--time-budget", str(budget), *target])
        results.left_out.append({"fix": finding.fix.title, "code": finding.code,
                                 "overrides": (exp.overrides if exp else None) or finding.fix.overrides,
                                 "predicted_s": round(cost.seconds, 1),
                                 "compile_s": round(cost.compile_s, 1) or None, "command": command,
                                 "speedup": exp.speedup if exp else None, "ci_low": exp.ci_low if exp else None,
                                 "ci_high": exp.ci_high if exp else None})


def _as_typed(config: ProbeConfig) -> str:
    """The script as the user typed it: ``train.py``, or ``-m pkg.train``."""
    return f"-m {config.script}" if config.module else config.script


def _patch(rec: Recommendation, profile: Profile, config: ProbeConfig, warnings: list[str], files: Files) -> Patch | None:
    """The recommendation written into the script's own lines, as `advise apply` writes it (report.json's
    `recommended.patch`); None, with a warning, where it could not be computed."""
    try:
        return patch_for(rec.overrides, profile.observed, profile.sources, _as_typed(config),
                         command=command_for(config.out), argv=config.args, files=files).patch
    except Exception as exc:  # noqa: BLE001 - the report matters more than its patch
        warnings.append(f"the patch of the recommendation could not be made: {type(exc).__name__}: {exc}")
        return None


def _confirm(results: ExperimentResults, config: ProbeConfig, profile: Profile, out: Path, progress: ExperimentProgress,
             stop: StopRequest) -> None:
    """--confirm: the recommendation the arms measured, measured again in fresh runs of the script."""
    rec = results.recommended
    if rec is None or rec.measured_by != "in-process" or not rec.overrides:
        if rec is not None and rec.measured_by == "fresh-run":
            results.notes.append("--confirm: the recommendation was already measured in fresh runs")
        return
    try:
        exp, runs = confirm_recommendation(rec, config, profile.steps, root=layout.make_subdir(out, layout.EXPERIMENTS, "confirm"),
                                           progress=progress, stop=stop, workers=script_workers(profile.observed),
                                           pacing=pacing_workers(profile))
    except Exception as exc:  # noqa: BLE001 - the in-process result stands; say why there is no confirmation
        results.notes.append(f"--confirm failed: {type(exc).__name__}: {exc}")
        return
    rec.confirmed = exp.to_dict()
    results.runs.extend(runs)
