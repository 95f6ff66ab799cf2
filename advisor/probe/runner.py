"""Parent side of the probe: spawn the child, sample it, watch progress, enforce the timeout.

The child runs in its own process group, so a crash, hang or OOM in the user's code never
takes the advisor down, and one ``killpg`` reaps DataLoader workers along with it. Stopping
is always polite first (SIGINT: the child still writes its trace and ``probe.json`` and runs
the script's ``atexit`` handlers), then forceful after a grace period. Whatever stops advise
(Ctrl-C, SIGTERM from a cancelled CI job, SIGHUP) reaches the script as that same SIGINT.
Processes the script started outside its group (``start_new_session=True``) are found and
ended too (see ``tree.py``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Protocol

import pandas as pd

from advisor import rundir
from advisor.atomic import open_nofollow, write_json_atomic, write_text_atomic
from advisor.interrupt import StopRequest, describe
from advisor.rundir import rank_suffix
from .entry import BOOTSTRAP
from .job_link import JobLink
from .protocol import WINDOW_PHASES, Phase, read_lines
from .sampler import Sampler
from .tree import ProcessTree

GRACE_S = 10.0  # after SIGINT, how long the child may take to export its trace
ATEXIT_S = 5.0  # how long the script's atexit handlers may run once it was stopped (inside GRACE_S)
HELPERS_GRACE_S = 5.0  # processes that escaped the script's group: SIGTERM, then SIGKILL after this




class Progress(Protocol):
    def update(self, phase: str, done: int, total: int) -> None: ...


@dataclass
class ProbeConfig:
    script: str  # a path, or with `module` a module name (python -m)
    args: list[str] = field(default_factory=list)
    module: bool = False
    out: Path = Path("advise-report")
    warmup: int = 5
    steps: int = 20
    profile_steps: int = 5
    timeout_s: float = 600.0
    sample_interval_s: float = 0.1
    overrides: dict = field(default_factory=dict)
    arms: bool = False  # after the window the child waits for plan files and measures arms itself
    plan_timeout_s: float = 600.0  # how long the child waits for a plan before it finishes
    arms_timeout_s: float = 900.0  # the deadline once the window is done (from the "window-done" line)
    nproc: int = 1  # ranks started through torch.distributed.run (--standalone: a free rendezvous port)
    memory_budget_bytes: int | None = None  # --memory-budget (None: the device's capacity)


@dataclass
class ProbeRun:
    """What the parent saw: the child's own account (`probe`) plus how it ended."""

    status: str  # ok | failed | timeout | no-steps | interrupted
    exit_code: int | None
    wall_s: float
    probe: dict
    files: rundir.RunFiles
    notes: list[str]
    signal: int | None = None  # the signal that stopped advise (interrupted runs)
    escaped: int = 0  # processes outside the script's group still alive when it ended: killed
    arms: dict = field(default_factory=dict)  # in-process arms: the child's arm step lines and window lines
    suffix: str = ""  # the rank whose files `files` names ('.rank0' for a job advise launched)
    ranks: list[dict] = field(default_factory=list)  # a launched job: each rank's own account


def child_command(config: ProbeConfig, cfg_path: Path) -> list[str]:
    """The probed script's command: the bootstrap, or N of them under torch's own elastic launcher."""
    boot = [sys.executable, "-c", BOOTSTRAP, str(cfg_path)]
    if config.nproc <= 1:
        return boot
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={config.nproc}",
            "--no-python", *boot]


def job_suffix(config: ProbeConfig) -> str:
    """Whose files the parent watches: its own rank's, or rank 0's of a job it launched."""
    return ".rank0" if config.nproc > 1 else rank_suffix()


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_probe(config: ProbeConfig, progress: Progress | None = None, stop: StopRequest | None = None,
              on_window_done: Callable[[int, list[str]], None] | None = None,
              on_arm_step: Callable[[dict], None] | None = None, link: JobLink | None = None) -> ProbeRun:
    """Run the script under the probe until its window ends, it exits, time runs out, or `stop` is set.

    With ``config.arms`` the child waits after the window for plan files: `on_window_done` is
    called with 0 for its "window-done" line and with N for each "plan-done" line of round N
    (it writes the next plan), and the rank suffixes that run it (the first is the one whose steps
    are judged: rank 0's in a job); from the "window-done" line on, the deadline is
    ``config.arms_timeout_s`` from then. In a job, round N + 1 waits until every rank ended round N.

    `link`: this rank's tie to the other ranks of a job a launcher started (torchrun, srun): their
    plans come from rank 0 over the job's channel, and rank 0 waits for every rank's round end.

    `stop` (the command's recorded signals) is polled: the first signal stops the script
    politely, a second kills it. Without one, Ctrl-C's KeyboardInterrupt does the same.
    """
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = job_suffix(config)
    names = rundir.names(suffix)
    if config.nproc > 1:  # one log and one report for the job (the launcher's and every rank's output)
        names = _job_names(suffix)
    every_rank = [rundir.names(f".rank{r}") for r in range(config.nproc)] if config.nproc > 1 else []
    may_spawn = config.nproc <= 1 and suffix == ""  # ranks the script starts itself write .rankN files
    own = names
    if may_spawn:
        every_rank = [rundir.names(f".rank{r}") for r in _spawned_ranks(out)]
    for files in (names, *every_rank):
        for name in (files.trace, files.steps_jsonl, files.steps_csv, files.samples_csv, files.probe_json, files.log,
                     files.plan, files.stop, files.arms_jsonl, files.sources):
            (out / name).unlink(missing_ok=True)
    cfg_path = out.resolve() / f".probe-config{rank_suffix()}.json"
    write_json_atomic(
        cfg_path,
        {
            "script": config.script,
            "module": config.module,
            "args": list(config.args),
            "out": str(out.resolve()),
            "warmup": config.warmup,
            "steps": config.steps,
            "profile_steps": config.profile_steps,
            "rank_suffix": None if config.nproc > 1 else rank_suffix(),  # launched ranks: from their RANK
            "overrides": config.overrides,
            "atexit_s": ATEXIT_S,
            "arms": config.arms,
            "plan_timeout_s": config.plan_timeout_s,
            "memory_budget_bytes": config.memory_budget_bytes,
        },
    )
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    notes: list[str] = []
    started = time.monotonic()
    tree = ProcessTree().__enter__()  # from here on, orphans of the script are re-parented to advise
    try:
        with open(out / names.log, "wb", opener=open_nofollow) as log:  # (unlinked above: a new file)
            child = subprocess.Popen(
                child_command(config, cfg_path),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
    except BaseException:
        tree.__exit__(None, None, None)
        raise
    tree.watch(child.pid)

    def kill_everything() -> None:  # advise gives up (a third signal): nothing of the script may outlive it
        _kill_group(child.pid, signal.SIGKILL)
        tree.kill_now()

    giving_up = stop.on_give_up(kill_everything) if stop is not None else contextlib.nullcontext()
    giving_up.__enter__()
    sampler = Sampler(child.pid, interval_s=config.sample_interval_s)
    sampler.start()
    timed_out = interrupted = False
    spawned: list[int] = []
    signum: int | None = None
    escaped = 0
    offset = 0
    window: list[dict] = []  # the measured window's step lines, as they arrive
    job = _JobArms(suffix, range(1, config.nproc) if config.arms else ())
    next_round: int | None = None
    deadline = started + config.timeout_s
    stop_sent_at: float | None = None
    try:
        while True:
            try:
                rc = child.poll()
                if may_spawn and not spawned and (spawned := _spawned_ranks(out)) and spawned[0] == 0:
                    # The script started ranks of its own: rank 0's steps are the job's from now on.
                    names, suffix, offset = _job_names(".rank0"), ".rank0", 0
                records, offset = read_lines(out / names.steps_jsonl, offset)
                window += [r for r in records if r["phase"] == Phase.MEASURE]
                for record in records:
                    if record["phase"] == Phase.ARM and on_arm_step is not None:
                        on_arm_step(record)
                    if record["phase"] == Phase.PLAN_DONE and record.get("error"):
                        job.failed = job.failed or f"rank {link.job.rank if link else 0}: {record['error']}"
                    if record["phase"] in (Phase.WINDOW_DONE, Phase.PLAN_DONE):
                        if record["phase"] == Phase.WINDOW_DONE:
                            deadline = time.monotonic() + config.arms_timeout_s
                            # the parent's rules read the window as a run dir: its steps and samples so far
                            probe_now = _load_probe(out / names.probe_json)
                            _write_steps_csv(out / names.steps_csv, window, probe_now.get("losses") or [])
                            sampler.write_csv(out / names.samples_csv)
                        if record["phase"] == Phase.WINDOW_DONE and may_spawn and config.arms and (now := _spawned_ranks(out)):
                            job = _JobArms(suffix, [r for r in now if r != 0])  # ranks the script started run the plans too
                        if on_window_done is not None:  # round 0 after the window, N + 1 after round N
                            next_round = 0 if record["phase"] == Phase.WINDOW_DONE else int(record.get("round") or 0) + 1
                        if link is not None:  # (after the window's steps.csv: a rank's window summary reads it)
                            link.line(record)
                job.poll(out)
                if link is not None:
                    link.poll()
                    job.failed = job.failed or link.failed
                if next_round is not None and job.ended(next_round - 1) and (link is None or link.ended(next_round - 1)):
                    on_window_done(next_round, job.suffixes)
                    next_round = None
                if job.failed and (job.others or link) and stop_sent_at is None:
                    # one rank's arm raised (out of memory, say): the others would wait for it in a collective
                    notes.append(f"the in-process experiments ended early, {job.failed}; the other ranks were stopped")
                    for files in (names, *job.others.values()):
                        (out / files.stop).touch()
                    if link is not None:
                        link.stop_job()
                    stop_sent_at = time.monotonic()
                    _kill_group(child.pid, signal.SIGINT)
                if link is not None and link.stop_asked and stop_sent_at is None:  # rank 0 stopped the job's arms
                    job.failed = "rank 0 stopped the job's arms"
                    (out / names.stop).touch()
                    stop_sent_at = time.monotonic()
                    _kill_group(child.pid, signal.SIGINT)
                records = [r for r in records if r["phase"] in WINDOW_PHASES]
                if progress is not None and records:
                    last = records[-1]
                    if last["phase"] == Phase.MEASURE:
                        progress.update(Phase.MEASURE, last["index"] + 1, config.steps)
                    else:
                        progress.update("warmup", last["index"] + last["warmup"] + 1, last["warmup"])
                if rc is not None:
                    break
                tree.poll()
                now = time.monotonic()
                if stop and not interrupted:  # advise was asked to stop: stop the script as Ctrl-C would
                    interrupted, signum = True, stop.signum
                    stop_sent_at = stop_sent_at or now
                    _kill_group(child.pid, signal.SIGINT)
                if stop is not None and stop.hurry:
                    _kill_group(child.pid, signal.SIGKILL)
                elif stop_sent_at is None and now >= deadline:
                    timed_out = True
                    stop_sent_at = now
                    _kill_group(child.pid, signal.SIGINT)
                elif stop_sent_at is not None and now - stop_sent_at > GRACE_S:
                    _kill_group(child.pid, signal.SIGKILL)
                time.sleep(0.05)
            except KeyboardInterrupt:
                if interrupted:  # a second Ctrl-C: stop waiting for a clean exit
                    _kill_group(child.pid, signal.SIGKILL)
                else:
                    interrupted, signum = True, signum or signal.SIGINT
                    stop_sent_at = time.monotonic()
                    _kill_group(child.pid, signal.SIGINT)
    finally:
        if child.poll() is None:
            _kill_group(child.pid, signal.SIGKILL)
        child.wait()
        if may_spawn and not interrupted and not timed_out:
            _await_rank_accounts(out, time.monotonic() + GRACE_S)  # ranks rank 0 did not wait for
        _kill_group(child.pid, signal.SIGKILL)  # orphaned DataLoader workers share the group
        try:  # helpers outside the group (start_new_session=True) would outlive the run
            escaped = tree.end_escaped(HELPERS_GRACE_S, hurry=lambda: stop is not None and stop.hurry)
        except Exception as exc:  # noqa: BLE001 - never lose the run over this clean-up
            notes.append(f"processes the script started outside its group were not checked: {type(exc).__name__}: {exc}")
        finally:
            giving_up.__exit__(None, None, None)
            tree.__exit__(None, None, None)
        sampler.stop()
        notes.extend(sampler.notes)
        sampler.write_csv(out / names.samples_csv)
        cfg_path.unlink(missing_ok=True)
        if may_spawn:  # the configs of ranks the script re-ran as new commands (spawned.py)
            for rank_cfg in out.glob(".probe-config.rank*.json"):
                rank_cfg.unlink(missing_ok=True)
    wall_s = time.monotonic() - started

    parent = None
    if may_spawn and (spawned := _spawned_ranks(out)) and spawned[0] != 0:  # the script's process is rank 0
        spawned = [0, *spawned]
    elif may_spawn and spawned:  # every rank, also those that started after rank 0
        parent = _load_probe(out / own.probe_json)  # the script's own process: it only started the ranks
        for name in (own.steps_jsonl, own.probe_json, own.arms_jsonl, own.plan, own.stop, own.sources):
            (out / name).unlink(missing_ok=True)
        names, suffix = _job_names(".rank0"), ".rank0"
        if (out / own.samples_csv).exists():  # the ranks ended between two polls: the samples are the job's
            os.replace(out / own.samples_csv, out / names.samples_csv)
    probe = _load_probe(out / names.probe_json)
    if parent and parent.get("status") == "failed" and probe.get("status") in ("done", "finished"):
        probe.update(status="failed", error=parent.get("error"), traceback=parent.get("traceback"))
    records, _ = read_lines(out / names.steps_jsonl, 0)
    arm_windows, _ = read_lines(out / names.arms_jsonl, 0)
    arms = {"steps": [r for r in records if r["phase"] == Phase.ARM], "windows": arm_windows}
    records = [r for r in records if r["phase"] in WINDOW_PHASES]  # not the arms' lines
    measured = [r for r in records if r["phase"] == Phase.MEASURE]
    # A child killed at the deadline never wrote probe.json: its step lines still tell.
    probe.setdefault("boundaries", len(records))
    probe.setdefault("measured_steps", len(measured))
    probe.setdefault("step_source", records[-1]["source"] if records else None)
    _write_steps_csv(out / names.steps_csv, measured, probe.get("losses") or [])
    ranks = [_rank_account(out, r, names if r == 0 and suffix == "" else None)
             for r in (range(config.nproc) if config.nproc > 1 else spawned)]
    for name in (names.steps_jsonl, names.arms_jsonl, names.plan, names.stop):  # the exchange with the child
        (out / name).unlink(missing_ok=True)

    if link is not None:
        notes.extend(link.notes)
    if job.failed and (job.others or link) and not (interrupted or timed_out) and len(measured) >= config.steps:
        # the ranks were stopped after their window, by advise: the window and the arms measured stand
        probe.update(status="done", error=None, traceback=None)
        ranks = [dict(r, status="done", error=None, traceback=None) if r["status"] in ("interrupted", "died") else r
                 for r in ranks]
    status = _status(probe, child.returncode, timed_out, interrupted, config.timeout_s, signum)
    failed = sorted((r for r in ranks if r["status"] not in ("done", "finished")), key=lambda r: r["ended_at"])
    if failed and status in ("ok", "failed"):  # the first rank to fail is the cause; the others broke on it
        first, then = failed[0], failed[1:]
        status = "failed"
        probe["error"] = f"rank {first['rank']} failed first: {first['error'] or first['status']}" + "".join(
            f"; then rank {r['rank']}: {(r['error'] or r['status'])[:120]}" for r in then)
        probe["traceback"] = first.pop("traceback", None) or probe.get("traceback")
    for r in ranks:
        r.pop("traceback", None), r.pop("ended_at", None)
    return ProbeRun(status=status, exit_code=child.returncode, wall_s=wall_s, probe=probe, files=names, notes=notes,
                    signal=signum if status == "interrupted" else None, escaped=escaped, arms=arms, suffix=suffix,
                    ranks=ranks)


class _JobArms:
    """The arms of a job's ranks: every rank runs the same plans, rank `judged`'s steps are judged.

    Round N + 1 is written once every rank has ended round N (a rank behind would otherwise find
    round N + 1's plan in place of round N's); `failed` names a rank whose arm raised.
    """

    def __init__(self, judged: str, others) -> None:
        self.others = {r: rundir.names(f".rank{r}") for r in others}
        self.suffixes = [judged, *(f".rank{r}" for r in self.others)]  # the judged rank first
        self._offsets = {r: 0 for r in self.others}
        self._ended = {r: -1 for r in self.others}  # the last round each rank ended
        self.failed: str | None = None

    def poll(self, out: Path) -> None:
        for r, files in self.others.items():
            lines, self._offsets[r] = read_lines(out / files.steps_jsonl, self._offsets[r])
            for line in (x for x in lines if x["phase"] == Phase.PLAN_DONE):
                self._ended[r] = max(self._ended[r], int(line.get("round") or 0))
                if line.get("error"):
                    self.failed = self.failed or f"rank {r}: {line['error']}"

    def ended(self, round_no: int) -> bool:
        """Every other rank has ended round `round_no` (-1: the window, which needs no wait)."""
        return round_no < 0 or all(done >= round_no for done in self._ended.values())


def _job_names(suffix: str) -> rundir.RunFiles:
    """Rank 0's files, with one log and one report for the job (the launcher's and every rank's output)."""
    return replace(rundir.names(suffix), log="script.log", report_json="report.json", report_html="report.html")


def _spawned_ranks(out: Path) -> list[int]:
    """Ranks with step lines in `out` (``steps.rankN.jsonl``): started by the script itself."""
    found = []
    for path in out.glob("steps.rank*.jsonl"):
        digits = path.name[len("steps.rank"):-len(".jsonl")]
        if digits.isdigit():
            found.append(int(digits))
    return sorted(found)


def _await_rank_accounts(out: Path, deadline: float) -> None:
    """Rank 0 ended: give the ranks the script started until `deadline` to write their accounts
    (a framework's rank 0 need not wait for the others, and the group is killed next)."""
    while time.monotonic() < deadline:
        ranks = _spawned_ranks(out)
        if all((out / rundir.names(f".rank{r}").probe_json).exists() for r in ranks if r):
            return
        time.sleep(0.05)


def _rank_account(out: Path, rank: int, files: rundir.RunFiles | None = None) -> dict:
    """One rank: its steps written as steps.rankN.csv, and how it ended (`files`: the rank's
    files when they are not .rankN's: the script's own process, as rank 0)."""
    files = files or rundir.names(f".rank{rank}")
    probe = _load_probe(out / files.probe_json)
    records, _ = read_lines(out / files.steps_jsonl, 0)
    measured = [r for r in records if r["phase"] == Phase.MEASURE]
    arm_windows, _ = read_lines(out / files.arms_jsonl, 0)
    if rank:  # rank 0's are written with the job's
        _write_steps_csv(out / files.steps_csv, measured, probe.get("losses") or [])
        for name in (files.steps_jsonl, files.arms_jsonl, files.plan, files.stop):
            (out / name).unlink(missing_ok=True)
    status = probe.get("status") or "died"
    error = probe.get("error") if probe else "its process ended without writing its results (killed, or crashed in C++)"
    try:  # when it wrote its account: the first rank to fail is the one the others waited for
        ended_at = (out / files.probe_json).stat().st_mtime
    except OSError:
        ended_at = float("inf")
    account = {"rank": rank, "status": status, "measured_steps": len(measured), "error": error,
               "traceback": probe.get("traceback"), "ended_at": ended_at}
    if arm_windows:  # in-process arms: the windows this rank ran with a fix switched on (the same on every rank)
        account["arm_windows_switched"] = sum(1 for w in arm_windows if w.get("applied"))
    return account


def _load_probe(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _write_steps_csv(path: Path, records: list[dict], losses: list) -> None:
    columns = ["index", "t_start", "t_end", "duration_s", "data_wait_s", "optimizer_s", "backward_s", "samples", "profiled",
               "source", "loss", "loss_finite"]
    frame = pd.DataFrame(records, columns=columns[:-2])
    frame["loss"] = [losses[i] if i < len(losses) else None for i in range(len(frame))]
    # A NaN loss and an unseen loss look alike in CSV; this column tells them apart.
    frame["loss_finite"] = [None if v is None else bool(math.isfinite(v)) for v in frame["loss"].astype(object)]
    write_text_atomic(path, frame[columns].to_csv(index=False))


def _status(probe: dict, returncode: int | None, timed_out: bool, interrupted: bool, timeout_s: float,
            signum: int | None = None) -> str:
    measured = probe.get("measured_steps", 0)
    if timed_out:
        seen = "" if probe.get("boundaries") else " with no training step seen (call advisor.step() in a loop the probe cannot see)"
        probe["error"] = f"timed out after {timeout_s:g} s{seen}"
        return "timeout"
    if interrupted:
        probe["error"] = f"interrupted ({describe(signum)})"
        return "interrupted"
    child_status = probe.get("status")
    if child_status is None:  # died without a word: a signal (OOM killer, segfault)
        sig = -returncode if returncode and returncode < 0 else None
        probe["error"] = f"the script's process was killed by signal {signal.Signals(sig).name}" if sig else f"the script's process exited with status {returncode} before writing its results"
        return "failed"
    if child_status == "failed":
        return "failed"
    if child_status == "interrupted":
        probe["error"] = probe.get("error") or "interrupted"
        return "interrupted"
    if measured == 0:
        boundaries = probe.get("boundaries", 0)
        if boundaries:
            probe["error"] = (
                f"the script ended after {max(0, boundaries - 1)} steps, before the warm-up finished; "
                "lower --warmup or let it run longer"
            )
        else:
            probe["error"] = (
                "no training steps seen: no torch.optim optimizer stepped, no DataLoader batch and no "
                "backward() ran; call advisor.step() at the end of each iteration"
            )
        return "no-steps"
    return "ok"
