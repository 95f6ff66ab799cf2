"""The flow behind each command: probe -> Profile -> rules -> report -> output.

Kept apart from commands/cli.py so the commands stay thin and the flow is callable from tests and
from the experiments, which re-run the same probe with a fix injected.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import msgspec
import psutil

from advisor.reports import terminal

from .. import notebook
from ..history import store
from ..gate import fingerprint
from . import ci_gate, measure, outputs
from .measure import ExperimentOptions
from ..job import report as job_report
from .. import report as report_mod
from ..analysis import metrics, steptime
from ..run_dir import layout
from ..run_dir.atomic import NotAFile, check_writable
from ..run_dir.chatter import strip_log, without_chatter
from .cli_exit import DISK_ERRNOS, fail, writing_error
from ..exit_codes import STATUS_EXIT, signal_exit
from ..run_dir.interrupt import StopRequest, deferred, describe
from ..profile import Profile
from ..job.rank import detect as detect_job, rank_suffix
from ..job.channel import ChannelError, open_channel
from ..job.rank_summary import summarize
from ..job.link import JobLink
from ..experiments.judge import ExperimentResults
from ..probe.runner import ProbeConfig, ProbeRun, run_probe

if TYPE_CHECKING:
    from rich.console import Console

    from ..engine import Settings
    from ..job.rank import JobRank
    from ..report import Report


def _warnings(run: ProbeRun, config: ProbeConfig, profile: Profile | None = None) -> list[str]:
    probe, out = run.probe, []
    cost = metrics.probe_cost_warning(steptime.throughput(profile.steps)) if profile is not None else None
    if cost:
        out.append(cost)
    measured = probe.measured_steps
    if run.status == "ok" and measured < config.steps:
        out.append(f"the script finished after {measured} measured steps (asked for {config.steps}); numbers rest on fewer steps")
    steps = profile.steps if profile is not None else None
    if run.status == "ok" and steps is not None and steptime.never_profiled(steps) \
            and (profile is None or profile.meta.steps_window == "measured"):
        why = (f"--profile-steps {config.profile_steps}" if not config.profile_steps else
               f"the script ended after {measured} measured steps, before the last {config.profile_steps}")
        out.append(f"no step ran under the profiler ({why}): the rules had no trace to read, so their silence "
                   "and the missing MFU say nothing about this script; give it more steps (--steps, or the "
                   "script's own iteration count)")
    contended = metrics.contention_warning(steps, profile.samples, profile.env.cpu_count) if profile else None
    if contended:
        out.append(contended)
    if probe.profiler_cut:
        out.append(probe.profiler_cut + "; the rules read those steps only")
    if probe.profiler_refused:
        out.append(probe.profiler_refused)
    if probe.profiler_error:
        out.append(f"the profiler trace could not be written: {probe.profiler_error}")
    if (probe.warmup or 0) > config.warmup:
        out.append(f"warm-up lengthened to {probe.warmup} steps so the DataLoader workers' prefetched batches "
                   "are used up before measuring")
    source = probe.step_source
    if source in ("dataloader", "backward"):
        out.append(f"no torch.optim optimizer stepped: step boundaries come from {source} calls")
    if run.escaped:
        many = run.escaped > 1
        out.append(f"{run.escaped} process{'es' if many else ''} the script started outside its process group "
                   f"(start_new_session) {'were' if many else 'was'} still running when it stopped and had to be killed")
    return out


def _artifacts(out: Path, names: layout.RunFiles, profile: Profile) -> dict:
    """The run's files, relative to the run dir; a trace that did not load is not listed as one that works."""
    wanted = {"report_json": names.report_json, "trace": names.trace, "steps_csv": names.steps_csv,
              "samples_csv": names.samples_csv, "log": names.log, "probe_json": names.probe_json,
              "sources_json": names.sources}
    if profile.trace is None:
        del wanted["trace"]
    return {key: name for key, name in wanted.items() if key == "report_json" or (out / name).exists()}


# --- a job a launcher started (torchrun, srun): rank 0 writes the job's report ---------------------

def _job_link(job: JobRank, out: Path) -> JobLink:
    """This rank's tie to the rest of its job, over the job's channel (:mod:`advisor.job.channel`)."""
    channel = open_channel(job, out, warn=lambda line: click.echo(f"advise: warning: {line}", err=True))

    def window() -> dict:  # this rank's window, for rank 0's rules
        return summarize(Profile.from_run_dir(out, job.suffix), {"status": "window"}, job.rank, job.node)

    return JobLink(channel, job, out, layout.names(job.suffix), on_window=window)


def _launcher_notes(link: JobLink | None, experiments: ExperimentOptions) -> list[str]:
    """What a job a launcher started did not do of what was asked, and why."""
    if link is None or not experiments.enabled:
        return []
    asked = [o for o, on in (("--fresh-runs", experiments.fresh_runs), ("--confirm", experiments.confirm)) if on]
    return [f"{' and '.join(asked)} not run: a fresh run of one rank would wait for the job's other ranks in its first "
            "collective; the fixes were measured inside the profiled run, on every rank"] if asked else []


def _finish_rank(run: ProbeRun, config: ProbeConfig, link: JobLink, out: Path, lock: layout.RunDirLock, stop: StopRequest) -> int:
    """A rank other than 0 of a job a launcher started: its files, its summary to rank 0, one line.

    Its verdict is the job's, in rank 0's report: a rank alone would misread waiting for a
    straggler as slow communication."""
    job = link.job
    _check_run_dir_after(run, out, lock)
    strip_log(out / run.files.log)
    profile = Profile.from_run_dir(out, run.suffix)
    summary = job_report.summarize_rank(run, profile, out, job)
    where = f"rank 0 through {link.channel.where}"
    try:
        link.channel.put(f"final/{job.rank}", summary)
    except ChannelError as exc:
        where = f"nowhere: {exc}"
    status = run.status
    click.echo(f"advise: {job.describe()}: {status}, {run.probe.measured_steps} measured steps; its files are "
               f"in {out}, its summary went to {where} (the job's report is rank 0's)", err=True)
    if status == "failed" and run.probe.traceback:
        click.echo(run.probe.traceback.rstrip(), err=True)
    signum = stop.signum or run.signal
    return signal_exit(signum) if signum else STATUS_EXIT[status]


def profile_script(**options: Any) -> int:
    """`advise profile` (options as `_profile`'s), one run at a time per run dir, stoppable at any moment.

    Ctrl-C, SIGTERM and SIGHUP are recorded, not raised (advisor.run_dir.interrupt): the probe and
    the experiments stop the script when they see one, and the report is still written.
    """
    lock = layout.RunDirLock(Path(options["out"]), rank_suffix())
    with deferred() as stop, lock:
        return _profile(**options, stop=stop, lock=lock)


def _take_run_dir(lock: layout.RunDirLock, out: Path) -> None:
    """Lock the run dir for this rank, then clear the last run's files (report.json first).

    A run dir another live run holds: one line naming its pid, exit 2, nothing touched.
    """
    try:
        layout.check_own_names(out, rank_suffix())  # a folder, FIFO or linked experiments/: refused now
        lock.acquire()
    except (layout.RunDirBusy, layout.OutsideRunDir) as exc:
        fail(str(exc))
    except NotAFile as exc:
        fail(writing_error(exc, out))
    except OSError as exc:
        fail(f"cannot lock the run dir {out}: {exc.strerror or exc}")
    try:
        layout.clear_previous(out, rank_suffix())
    except OSError as exc:
        fail(f"cannot clear the last run's files from {out}: {exc.strerror or exc}")


def _profile(*, script: str, script_args: list[str], module: bool = False, nproc: int = 1, steps: int, warmup: int,
             profile_steps: int, out: Path, timeout_s: float, as_json: bool, experiments: ExperimentOptions | None = None,
             baseline: str | None = None, max_regression: float = 0.10, rule_settings: Settings | None = None,
             memory_budget_bytes: int | None = None, history: str | None = None, stop: StopRequest,
             lock: layout.RunDirLock) -> int:
    """`advise profile`: probe the script, write the run dir, print the summary.

    With `baseline`, then compare against it (as `advise compare`): exit 3 on a regression.
    """
    baseline_report = ci_gate.check_baseline(baseline) if baseline else None  # bad input: exit 2 before the run
    con = terminal.console(stderr=as_json)
    # In-process arms: in a job (ranks advise launched, or ranks the script started itself) every
    # rank runs the same plan and switches at the same step (see probe/runner.py, _JobArms).
    # A job a launcher started (torchrun, srun: advise in every rank) has no fresh runs: one rank
    # re-run alone would wait for the others in its first collective.
    job = detect_job()
    launched_by_other = job.multi and nproc <= 1
    in_process = bool(experiments and experiments.enabled and (not experiments.fresh_runs or launched_by_other))
    config = ProbeConfig(script=script, args=script_args, module=module, nproc=nproc, out=out, warmup=warmup, steps=steps,
                         profile_steps=profile_steps, timeout_s=timeout_s, arms=in_process,
                         arms_budget_s=experiments.time_budget_s if experiments else None,
                         memory_budget_bytes=memory_budget_bytes, since=command_started())
    started = _Started(report_mod.now_iso(), time.monotonic(), fingerprint.load_avg())  # the machine's load before the script
    _open_run_dir(out, lock)
    experiments = experiments or ExperimentOptions()
    link = _job_link(job, out) if launched_by_other else None
    if link is not None and not link.leader:  # its summary goes to rank 0, which writes the job's report
        return _finish_rank(run_probe(config, None, stop, link=link), config, link, out, lock, stop)
    if link is not None:
        layout.clear_job_report(out)
    shown = f"-m {script}" if module else script  # how the report and the progress name the job
    measured = _run_and_measure(config, experiments, rule_settings, link, out, lock, con, shown, stop)
    report = _build(measured, config, experiments, link, out, shown, started)
    if link is not None:
        link.channel.close()
    report, status, signum = _deliver(report, measured, out, con, as_json, stop)
    if signum:
        return signal_exit(signum)
    if history:
        _append_history(history, report, Path.cwd() if module else Path(script).resolve().parent)
    if baseline_report is not None and baseline is not None and status == "ok":
        return ci_gate.compare_after_profile(baseline_report, baseline, report, str(out / measured.run.files.report_json),
                                             out, max_regression=max_regression, as_json=as_json)
    return STATUS_EXIT[status]


def command_started() -> float:
    """When this advise process started, on time.monotonic()'s clock (its imports included: a
    --no-experiments run pays them too)."""
    return time.monotonic() - max(0.0, time.time() - psutil.Process().create_time())


@dataclass
class _Started:
    """When the run started, and how busy the machine was then (the fingerprint's load)."""

    at: str
    monotonic: float
    load: float | None


@dataclass
class _Measured:
    """What the probe and the experiments saw: the run, its Profile, the job's merged ranks (a
    launched job's), the findings with their experiments, and the run's outcome."""

    run: ProbeRun
    profile: Profile
    merged: dict | None
    findings: list
    rule_warnings: list[str]
    results: ExperimentResults | None
    outcome: tuple  # (status, signal, error, traceback): _outcome's


def _open_run_dir(out: Path, lock: layout.RunDirLock) -> None:
    """The run dir made, writable, locked and cleared; read-only, forbidden or full is said now,
    not after the run."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        check_writable(out)
    except OSError as exc:
        fail(writing_error(exc, out) if exc.errno in DISK_ERRNOS
             else f"cannot create the run dir {out}: {exc.strerror}")
    _take_run_dir(lock, out)


def _run_and_measure(config: ProbeConfig, experiments: ExperimentOptions, rule_settings: Settings | None, link: JobLink | None,
                     out: Path, lock: layout.RunDirLock, con: Console, shown: str, stop: StopRequest) -> _Measured:
    """The script under the probe (the arms in it), its Profile, and the fixes measured."""
    session = measure.arms_session(config, experiments, rule_settings, link, stop) if config.arms else None
    with terminal.ProbeProgress(con, f"profiling {shown}") as progress:
        if session is not None:
            session.progress = progress
        run = run_probe(config, progress, stop, on_window_done=session.on_window_done if session else None,
                        on_arm_step=session.on_arm_step if session else None, link=link,
                        on_arm_window=session.on_arm_window if session else None)
        if link is not None:  # the job's report, whoever launched it
            run.files = replace(run.files, report_json="report.json", report_html="report.html")
        _check_run_dir_after(run, out, lock)
        strip_log(out / run.files.log)  # the profiler's status lines are not the script's output
        progress.phase("analysing")
        profile = Profile.from_run_dir(out, run.suffix)
        if run.ranks:  # a launched job: the cross-rank rules read every rank
            profile.ranks = [profile] + [Profile.from_run_dir(out, f".rank{a['rank']}") for a in run.ranks[1:]]
            for rank_profile in profile.ranks:  # ranks the script spawned share this node, as torchrun's say
                rank_profile.env.local_world_size = rank_profile.env.local_world_size or len(run.ranks)
        merged = job_report.merge_job(profile, run, link, out, stop) if link is not None else None
        findings, rule_warnings, results = measure.measure_fixes(session, run, profile, merged, link, config, experiments,
                                                          rule_settings, out, progress, stop)
    outcome = _outcome(run, merged, results, stop, experiments.enabled and bool(findings))
    return _Measured(run, profile, merged, findings, rule_warnings, results, outcome)


def _build(m: _Measured, config: ProbeConfig, experiments: ExperimentOptions, link: JobLink | None, out: Path, shown: str,
           started: _Started) -> Report:
    """The run's typed Report."""
    run, profile, merged, results = m.run, m.profile, m.merged, m.results
    status, _, error, tb = m.outcome
    return report_mod.build_report(
        profile,
        status=status,
        script=shown,
        argv=list(config.args),
        started_at=started.at,
        error=error,
        traceback=tb,
        findings=m.findings,
        recommended=results.recommended if results else None,
        warnings=_warnings(run, config, profile) + profile.meta.notes + m.rule_warnings
        + (results.notes if results else []) + (merged["warnings"] if merged else []) + _launcher_notes(link, experiments),
        artifacts={**_artifacts(out, run.files, profile), "report_html": run.files.report_html},
        fingerprint=fingerprint.collect(profile.env, list(config.args), load_start=started.load,
                                        with_gpu=profile.device == "cuda"),
        notes=run.notes + _notebook_notes(config), wall_s=run.wall_s, total_wall_s=time.monotonic() - started.monotonic,
        experiments=results.summary() if results else None,
        ranks=merged["rows"] if merged else _ranks(run, profile),
        **({"hta_breakdown": merged["hta"]} if merged and merged["hta"] else {}),
    )


def _append_history(path: str, report: Report, folder: Path) -> None:
    """--history FILE: the run's record appended (a file that cannot take it: one line, exit 2)."""
    try:
        store.append(path, store.profile_record(report, folder))
    except store.HistoryError as exc:
        fail(str(exc))


def _notebook_notes(config: ProbeConfig) -> list[str]:
    """A notebook's lines a kernel would run outside it (shell lines, installs, unknown magics): never run, listed."""
    if config.module or not notebook.is_notebook(config.script):
        return []
    try:
        skipped = notebook.never_run(notebook.read(config.script), config.script)
    except notebook.NotebookError:
        return []  # read before the run (the command's check): changed since
    return [f"not run (outside the notebook: a shell line, an install or a magic advise does not run): {line}"
            for line in skipped]


def _deliver(report: Report, m: _Measured, out: Path, con: Console, as_json: bool, stop: StopRequest) -> tuple:
    """The page, report.json and the summary written; a signal that came while they were written
    said in the report too. Returns (the report as written, its status, the signal)."""
    run, profile = m.run, m.profile
    status, signum, _, _ = m.outcome
    html_path = outputs.write_renderings(report, out, profile, con)
    if html_path is None:  # the page was not written: the report does not name it
        report = msgspec.structs.replace(report, artifacts=msgspec.structs.replace(report.artifacts, report_html=None))
    report_mod.write_report(report, out / run.files.report_json)
    outputs.emit(report, as_json, str(out))
    outputs.say_html(html_path, con, as_json)
    if stop.signum and not signum:  # a signal while the report was written: the report says so too
        signum = stop.signum
        if status == "ok":
            status = "interrupted"
            report = msgspec.structs.replace(report, status=status, error=f"interrupted ({describe(signum)}) while the report was written")
            if html_path is not None:
                outputs.write_renderings(report, out, profile, con, summary=False)
            report_mod.write_report(report, out / run.files.report_json)
    if status == "failed":
        _show_failure(run, out, con)
    if signum:
        click.echo(f"advise: interrupted ({describe(signum)}); what was measured is in {out / run.files.report_json}",
                   err=True)
    return report, status, signum


def _outcome(run: ProbeRun, merged: dict | None, results: ExperimentResults | None, stop: StopRequest,
             experimented: bool) -> tuple:
    """(status, signal, error, traceback) of the run: the first failing rank's account in a job a
    launcher started, "interrupted" where a signal came after the measurements were whole."""
    signum = stop.signum or run.signal or (results.interrupted if results else None)
    status, error, tb = run.status, run.probe.error, run.probe.traceback
    if merged is not None and merged["first"] is not None:  # the launcher stopped rank 0 because another rank failed
        first = merged["first"]
        status, signum, tb = "failed", None, first.get("traceback") or tb
        error = f"rank {first['rank']} failed first: {first.get('error') or first['status']}" + "".join(
            f"; then rank {a['rank']}: {(a.get('error') or a['status'])[:120]}" for a in merged["then"])
    if signum and status == "ok":  # the measurements were whole; what came after them was cut short
        cut = "; the experiments were cut short" if results else "; the experiments did not run"
        status, error = "interrupted", f"interrupted ({describe(signum)}) after the measurements" + (
            cut if experimented else "")
    return status, signum, error, tb


def _ranks(run: ProbeRun, profile: Profile) -> list[dict]:
    """Each launched rank: how it ended and its own steps (report.json `ranks`; empty for one process).

    The steps are those of the rank Profiles the cross-rank rules read (`profile.ranks`, in rank order)."""
    rows = []
    for account, rank_profile in zip(run.ranks, profile.ranks):
        tp = steptime.throughput(rank_profile.steps)
        rows.append(dict(account, samples_per_s=tp["samples_per_s"], step_time_median_s=tp["step_time_median_s"],
                         step_time_p90_s=tp["step_time_p90_s"]))
    return rows


def _check_run_dir_after(run: ProbeRun, out: Path, lock: layout.RunDirLock) -> None:
    """Raise the OSError of a disk that filled up (or went read-only) while the script ran; exit 2
    when the run dir itself was removed or emptied under the run (its lock file is not ours).

    The child's trace export and its own files fail inside the child; the run is then the disk's
    failure, not the script's, and `advise` exits 2 (cli.run_dir_errors) instead of reporting it.
    """
    if not lock.still_held():
        fail(f"the run dir {out} was removed or emptied while the script ran (does the script clear its own "
             "output folder?); give advise a --out of its own")
    code = run.probe.profiler_errno
    if code in DISK_ERRNOS:
        raise OSError(code, os.strerror(code), str(out / run.files.trace))
    check_writable(out)


def _show_failure(run: ProbeRun, out: Path, con: Console) -> None:
    tb = run.probe.traceback
    if tb:
        con.print("\nThe script raised (its own traceback, as python would print it):", style="red", highlight=False)
        click.echo(tb.rstrip(), err=True)
        return
    try:
        tail = without_chatter((out / run.files.log).read_text(errors="replace")).splitlines()[-15:]
    except OSError:
        tail = []
    if tail:
        con.print(f"\nLast lines of {out / run.files.log}:", style="red", highlight=False)
        click.echo("\n".join(tail), err=True)
