"""The job's report from its ranks, whoever launched them: rank 0's side of the merge.

Under a launcher (torchrun, srun) every rank's advise probes its own rank and reduces it to a
summary (:mod:`advisor.job.rank_summary`); rank 0 waits, bounded, for the others' summaries on the
job's channel (:mod:`advisor.job.channel`), gives the cross-rank rules the whole job, and writes
report.json with `ranks`, the rank that failed first, HTA's breakdown per rank and the arms the
ranks did not all switch. The rules that plan the arms read every rank's window the same way
(:func:`merge_windows`; :func:`read_windows` for the ranks advise launched itself, whose files
share its run dir). `link` is the rank's :class:`advisor.job.link.JobLink` (its channel,
its job, the other ranks), `run` the runner's ProbeRun, `stop` the command's StopRequest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, Sequence

import json
import os
import time
from pathlib import Path

from ..analysis import temporal
from ..run_dir import layout
from ..run_dir.atomic import write_json_atomic
from ..run_dir.protocol import Phase, rank_account, read_account
from .rank import detect as detect_job
from .channel import ChannelError, wait_for
from ..model import Experiment, Finding, Recommendation, Verdict
from ..profile import Profile
from .rank_summary import disagreements, missing_row, rank_row, summarize, to_profile

if TYPE_CHECKING:
    from ..run_dir.interrupt import StopRequest
    from ..run_dir.layout import RunFiles
    from ..run_dir.protocol import ChildAccount, RankLines
    from .link import JobLink
    from .rank import JobRank


# The layers above (the probe, the experiments) are named here by what this module reads of them.

class ProbeRun(Protocol):
    """A rank's run as its runner saw it (:class:`advisor.probe.runner.ProbeRun`)."""

    @property
    def status(self) -> str: ...
    @property
    def probe(self) -> ChildAccount: ...
    @property
    def files(self) -> RunFiles: ...
    @property
    def arms(self) -> RankLines | None: ...


class ExperimentResults(Protocol):
    """What the experiments measured (:class:`advisor.experiments.judge.ExperimentResults`)."""

    findings: list[Finding]
    recommended: Recommendation | None


class FreshCandidate(Protocol):
    """A fix only a fresh run can switch (:class:`advisor.experiments.plan.Candidate`)."""

    @property
    def finding_index(self) -> int | None: ...


WINDOW_WAIT_S = 60.0  # rank 0's rules wait this long for the other ranks' windows before planning alone
FINAL_WAIT_S = 60.0   # rank 0 waits this long (after its own run) for the other ranks' summaries ...
STOPPED_WAIT_S = 5.0  # ... or this long once the job is being stopped (the launcher kills it soon after)


def job_wait(default: float) -> float:
    """ADVISE_JOB_WAIT_S bounds both waits (a job whose ranks end far apart, or a test)."""
    try:
        return float(os.environ.get("ADVISE_JOB_WAIT_S") or default)
    except ValueError:
        return default


def merge_windows(profile: Profile, link: JobLink, stop: StopRequest | None) -> list[str]:
    """Rank 0's window joined by the other ranks' (their summaries): the cross-rank rules read the job."""
    keys = [f"window/{r}" for r in link.others]
    wait = job_wait(WINDOW_WAIT_S)
    try:
        found = wait_for(link.channel, keys, time.monotonic() + wait, stop)
    except ChannelError as exc:
        return [f"the rules read rank 0's window alone: {exc}"]
    windows = [found[k] for k in keys if k in found and "steps" in found[k]]
    profile.ranks = [profile] + [to_profile(w) for w in windows]
    missing = [r for r, k in zip(link.others, keys) if k not in found or "steps" not in found[k]]
    return [f"the rules read the job without rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}: "
            f"no window summary within {wait:.0f} s"] if missing else []


def no_fresh_runs(findings: list[Finding], fresh: Sequence[FreshCandidate] | None) -> None:
    """A job a launcher started: a fix only a fresh run can switch stays unmeasured (one rank re-run
    alone would wait for the others in its first collective)."""
    for candidate in fresh or []:
        finding = findings[candidate.finding_index]  # type: ignore[index]  # a fresh-run candidate is a finding's
        if finding.experiment is None or finding.experiment.verdict == Verdict.NOT_MEASURED:
            finding.experiment = Experiment.not_measured(
                "only a fresh run can switch it, and a fresh run of one rank needs the job's other ranks: "
                "apply it and profile the job again")


def read_windows(profile: Profile, out: Path, suffixes: list[str], stop: StopRequest | None) -> list[str]:
    """Rank 0's window joined by the other ranks' windows in the run dir, each read once its child
    says its window is over (its probe file: ``phase: window-done``, written after its trace): the
    cross-rank rules then read the job, as they do after the run."""
    deadline, pending, ranks = time.monotonic() + job_wait(WINDOW_WAIT_S), list(suffixes), {}
    while pending and time.monotonic() < deadline and not (stop is not None and stop):
        for suffix in list(pending):
            account = read_account(out / layout.names(suffix).probe_json)
            if account is not None and account.phase == Phase.WINDOW_DONE:
                ranks[suffix] = Profile.from_run_dir(out, suffix)
                pending.remove(suffix)
        if pending:
            time.sleep(0.05)
    profile.ranks = [profile] + [ranks[s] for s in suffixes if s in ranks]
    return [f"the rules read the job without {', '.join(s.lstrip('.') for s in pending)}: no window in "
            f"{job_wait(WINDOW_WAIT_S):.0f} s"] if pending else []


def own_account(run: ProbeRun, out: Path) -> dict:
    """This rank's account, as the runner gives one for each rank it launched."""
    probe = run.probe
    try:
        ended_at = (out / run.files.probe_json).stat().st_mtime
    except OSError:
        ended_at = time.time()
    return rank_account(detect_job().rank, probe, probe.measured_steps, ended_at, (run.arms.arm_windows if run.arms else []),
                        "interrupted" if run.status == "interrupted" else None)  # stopped by a signal


def summarize_rank(run: ProbeRun, profile: Profile, out: Path, job: JobRank) -> dict:
    """This rank's summary (rank_summary.summarize), also kept beside its files as summary.rankN.json."""
    summary = summarize(profile, own_account(run, out), job.rank, job.node, (run.arms.arm_windows if run.arms else []))
    write_json_atomic(out / layout.names(job.suffix).summary, summary)
    return summary


def merge_job(profile: Profile, run: ProbeRun, link: JobLink, out: Path, stop: StopRequest | None) -> dict:
    """Rank 0 of a job a launcher started: wait (bounded) for every other rank's summary and give the
    cross-rank rules the job. Returns report.json's `ranks` (rows), `warnings`, the rank that failed
    first (`first`, `then`), the job's `hta` breakdown and the arms the ranks did not all switch (`disagree`)."""
    job = link.job
    own = summarize_rank(run, profile, out, job)
    keys = [f"final/{r}" for r in link.others]
    wait = job_wait(STOPPED_WAIT_S if stop else FINAL_WAIT_S)
    warnings: list[str] = []
    try:
        found = wait_for(link.channel, keys, time.monotonic() + wait, None if stop else stop)
    except ChannelError as exc:
        found = {}
        warnings.append(f"the other ranks' summaries could not be read: {exc}")
    summaries = [found[k] for k in keys if k in found]
    profile.ranks = [profile] + [to_profile(s) for s in summaries]
    rows = {0: rank_row(own)}
    rows.update({s["rank"]: rank_row(s) for s in summaries})
    missing = [r for r, k in zip(link.others, keys) if k not in found]
    rows.update({r: dict(missing_row(r, wait), node=None, host=None) for r in missing})
    if missing:
        warnings.append(f"rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} sent no summary within "
                        f"{wait:.0f} s: the cross-rank figures are of the ranks that did")
    failed = sorted((s["account"] for s in [own, *summaries] if s["account"].get("status") not in ("done", "finished")),
                    key=lambda a: a.get("ended_at") or float("inf"))
    first = None
    if failed and failed[0].get("status") == "failed":
        first = failed[0]
    hta = [row for s in [own, *summaries] for row in s.get("hta") or []]
    return {"rows": [rows[r] for r in sorted(rows)], "warnings": warnings, "first": first, "then": failed[1:],
            "hta": {"basis": temporal.BASIS, "ranks": sorted(hta, key=lambda r: r["rank"])} if hta else None,
            "disagree": disagreements(own.get("arm_windows") or [],
                                      {s["rank"]: s.get("arm_windows") or [] for s in summaries})}


def settle_disagreements(results: ExperimentResults | None, arms_disagree: dict[str, list[str]], notes: list[str]) -> None:
    """An arm the ranks did not all switch measured another configuration: its verdict does not stand."""
    if results is None or not arms_disagree:
        return
    for key, ranks_said in arms_disagree.items():
        notes.append(f"the ranks did not all switch {key}: {'; '.join(ranks_said)}; its measurement is not the fix's")
    for finding in results.findings:
        exp = finding.experiment
        if exp is None or exp.measured_by != "in-process" or not exp.overrides:
            continue
        key = json.dumps(exp.overrides, sort_keys=True)
        if key in arms_disagree:
            exp.verified, exp.verdict = False, Verdict.NOT_CONFIRMED
            exp.reason = "not switched on every rank (" + "; ".join(arms_disagree[key]) + ")"
    rec = results.recommended
    if rec is not None and rec.measured_by == "in-process" and any(
            all(rec.overrides.get(k) == v for k, v in json.loads(key).items()) for key in arms_disagree):
        notes.append("no recommendation: a fix in it was not switched on every rank")
        results.recommended = None
