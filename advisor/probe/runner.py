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
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Protocol


from advisor.run_dir import layout
from advisor.run_dir.atomic import open_nofollow
from advisor.run_dir.interrupt import StopRequest, describe
from advisor.job.rank import rank_suffix
from advisor.job.link import JobLink
from advisor.run_dir.protocol import (ArmStepLine, ChildAccount, ChildConfig, Held, Line, Phase, PlanDone, RankLines,
                                      StepLine, WindowDone, read_account, write_config)
from .config import ProbeConfig, auto_arms_budget
from .job_shapes import job_shape, lines_of, write_steps_csv
from .sampler import Sampler
from .stops import BUDGET_GRACE_S, GRACE_S, Stops
from .tree import ProcessTree
from .holds import LOOKBACK_TICKS, Holds
from advisor.analysis.metrics import MIN_TICKS

ATEXIT_S = 5.0  # how long the script's atexit handlers may run once it was stopped (inside GRACE_S)
HELPERS_GRACE_S = 5.0  # processes that escaped the script's group: SIGTERM, then SIGKILL after this


class Progress(Protocol):
    def update(self, phase: str, done: int, total: int) -> None: ...


@dataclass
class ProbeRun:
    """What the parent saw: the child's own account (`probe`) plus how it ended."""

    status: str  # ok | failed | timeout | no-steps | interrupted
    exit_code: int | None
    wall_s: float
    probe: ChildAccount  # the child's account, completed by how the parent saw it end
    files: layout.RunFiles
    notes: list[str]
    signal: int | None = None  # the signal that stopped advise (interrupted runs)
    escaped: int = 0  # processes outside the script's group still alive when it ended: killed
    arms: RankLines | None = None  # the watched rank's lines (in-process arms: their steps and windows)
    suffix: str = ""  # the rank whose files `files` names ('.rank0' for a job advise launched)
    ranks: list[dict] = field(default_factory=list)  # a launched job: each rank's own account
    budget_ended: bool = False  # the arms' time budget ended them (a normal end: the run is ok)


def job_suffix(config: ProbeConfig) -> str:
    """Whose files the parent watches: its own rank's, or rank 0's of a job it launched."""
    return ".rank0" if config.nproc > 1 else rank_suffix()


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_probe(config: ProbeConfig, progress: Progress | None = None, stop: StopRequest | None = None,
              on_window_done: Callable[[int, list[str], RankLines], float | None] | None = None,
              on_arm_step: Callable[[ArmStepLine], None] | None = None, link: JobLink | None = None,
              on_arm_window: Callable[[RankLines], float | None] | None = None) -> ProbeRun:
    """Run the script under the probe until its window ends, it exits, time runs out, or `stop` is set.

    With ``config.arms`` the child waits after the window for plan files: `on_window_done` is
    called with 0 for its "window-done" line and with N for each "plan-done" line of round N
    (it writes the next plan), and the rank suffixes that run it (the first is the one whose steps
    are judged: rank 0's in a job); from the "window-done" line on, ``config.arms_budget_s`` is the
    arms' time: at its end the child is asked to stop at its next step boundary (its stop file), and
    the run ends ok. What `on_window_done` returns, seconds, lengthens that budget (the measured
    window measured again: :mod:`advisor.experiments.look`), and so do those `on_arm_window` returns
    as each arm window of a single process ends (a neighbour's windows set aside). ``config.timeout_s``
    bounds the script until its window is done. In a job, round N + 1 waits until every rank ended round N.

    `link`: this rank's tie to the other ranks of a job a launcher started (torchrun, srun): their
    plans come from rank 0 over the job's channel, and rank 0 waits for every rank's round end.

    `stop` (the command's recorded signals) is polled: the first signal stops the script
    politely, a second kills it. Without one, Ctrl-C's KeyboardInterrupt does the same.
    """
    return ProbeSession(config, progress, stop, on_window_done, on_arm_step, link, on_arm_window).run()


class ProbeSession:
    """One probed run, seen from the parent: the child, its sampler and process tree, the step
    lines read as they arrive, the arms' rounds, and its stops (:mod:`.stops`)."""

    def __init__(self, config: ProbeConfig, progress: Progress | None, stop: StopRequest | None,
                 on_window_done: Callable[[int, list[str], RankLines], float | None] | None,
                 on_arm_step: Callable[[ArmStepLine], None] | None, link: JobLink | None,
                 on_arm_window: Callable[[RankLines], float | None] | None = None) -> None:
        self.config, self.progress, self.stop, self.link = config, progress, stop, link
        self.on_window_done, self.on_arm_step, self.on_arm_window = on_window_done, on_arm_step, on_arm_window
        self.out = Path(config.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.shape = job_shape(config, self.out)
        self.cfg_path = self.out.resolve() / f".probe-config{rank_suffix()}.json"
        self.notes: list[str] = []
        self.stops = Stops(stop, self._signal, self._ask_ranks_to_stop, self.notes)
        self.escaped = 0
        self.lines = lines_of(self.out, self.shape.names)  # the watched rank's, as they arrive
        self.job = _JobArms(self.shape.suffix, self.shape.arm_ranks())
        self.next_round: int | None = None
        self.holds: Holds | None = None  # the hold file's keeper, once the arms start (.holds)

    def run(self) -> ProbeRun:
        self._prepare()
        self._start()
        try:
            self._watch()
        finally:
            self._end()
        wall_s = time.monotonic() - self.started
        return self._result(wall_s)

    # --- start ---

    def _prepare(self) -> None:
        for files in self.shape.stale():
            for name in (files.trace, files.steps_jsonl, files.steps_csv, files.samples_csv, files.probe_json, files.log,
                         files.plan, files.stop, files.hold, files.arms_jsonl, files.sources):
                (self.out / name).unlink(missing_ok=True)
        config = self.config
        write_config(self.cfg_path, ChildConfig(
            script=config.script, module=config.module, args=list(config.args), out=str(self.out.resolve()),
            warmup=config.warmup, steps=config.steps, profile_steps=config.profile_steps,
            rank_suffix=self.shape.child_suffix(), overrides=config.overrides, atexit_s=ATEXIT_S, arms=config.arms,
            plan_timeout_s=config.plan_timeout_s, memory_budget_bytes=config.memory_budget_bytes))

    def _start(self) -> None:
        env = dict(os.environ, **self.config.env, PYTHONUNBUFFERED="1")
        self.started = time.monotonic()
        self.tree = ProcessTree().__enter__()  # from here on, orphans of the script are re-parented to advise
        try:
            with open(self.out / self.shape.names.log, "wb", opener=open_nofollow) as log:  # (unlinked: a new file)
                self.child = subprocess.Popen(
                    self.shape.command(self.cfg_path),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=self.config.cwd,
                    start_new_session=True,
                )
        except BaseException:
            self.tree.__exit__(None, None, None)
            raise
        self.tree.watch(self.child.pid)
        stop = self.stop
        self.giving_up = stop.on_give_up(self._kill_everything) if stop is not None else contextlib.nullcontext()
        self.giving_up.__enter__()
        self.sampler = Sampler(self.child.pid, interval_s=self.config.sample_interval_s)
        self.sampler.start()
        self.stops.deadline = self.started + self.config.timeout_s

    def _kill_everything(self) -> None:  # advise gives up (a third signal): nothing of the script may outlive it
        self._signal(signal.SIGKILL)
        self.tree.kill_now()

    def _signal(self, sig: int) -> None:
        _kill_group(self.child.pid, sig)

    # --- while the child runs ---

    def _watch(self) -> None:
        while True:
            try:
                rc = self.child.poll()
                records = self._read()
                self._arms()
                self._show(records)
                if rc is not None:
                    break
                self.tree.poll()
                if self.holds is not None:
                    self.holds.poll(self.sampler.last(LOOKBACK_TICKS), time.monotonic())
                self.stops.enforce(time.monotonic())
                time.sleep(0.05)
            except KeyboardInterrupt:
                self.stops.ctrl_c(time.monotonic())

    def _read(self) -> list[Line]:
        """The new step lines of the watched rank, each acted on."""
        if self.shape.poll():
            self.lines = lines_of(self.out, self.shape.names)
        windows = len(self.lines.arm_windows)
        lines = self.lines.read()
        for line in lines:
            self._line(line)
        if len(self.lines.arm_windows) > windows:
            self._arm_window()
        return lines

    def _arm_window(self) -> None:
        """An arm window of a single process ended: the budget grows by what `on_arm_window` says (the
        parent reads the round so far on the sampler's ticks written now)."""
        if self.on_arm_window is None or self.link is not None or self.job.others:
            return
        self.sampler.write_csv(self.out / self.shape.names.samples_csv)
        if more_s := self.on_arm_window(self.lines):
            self.stops.lengthen_budget(more_s)

    def _line(self, line: Line) -> None:
        if isinstance(line, ArmStepLine) and self.on_arm_step is not None:
            self.on_arm_step(line)
        if isinstance(line, Held):
            self._held(line)
        if isinstance(line, PlanDone) and line.error:
            self.job.failed = self.job.failed or f"rank {self.link.job.rank if self.link else 0}: {line.error}"
        if not isinstance(line, (WindowDone, PlanDone)):
            return
        if isinstance(line, WindowDone):
            self._window_done()
        if self.on_window_done is not None:  # round 0 after the window, N + 1 after round N
            self.next_round = 0 if isinstance(line, WindowDone) else line.round + 1
        if self.link is not None:  # (after the window's steps.csv: a rank's window summary reads it)
            self.link.line(line)

    def _window_done(self) -> None:
        now = time.monotonic()
        if self.config.arms_budget_s is None:  # auto: from the run's own way to its window; a job's
            # other ranks are stopped by its leader, whose own way there may have been a little longer
            follower = self.link is not None and not self.link.leader
            since = self.started if self.config.since is None else min(self.config.since, self.started)
            self.config.arms_budget_s = auto_arms_budget(now - since) + (2 * BUDGET_GRACE_S if follower else 0.0)
        self.stops.arms_budget(now + self.config.arms_budget_s)
        # the parent's rules read the window as a run dir: its steps and samples so far
        names = self.shape.names
        probe_now = read_account(self.out / names.probe_json)
        write_steps_csv(self.out / names.steps_csv, self.lines.measured, probe_now.losses if probe_now else [])
        self.sampler.write_csv(self.out / names.samples_csv)
        if (others := self.shape.window_done()) is not None:
            self.job = _JobArms(self.shape.suffix, others)
        self.holds = self._holds(probe_now)

    def _holds(self, account: ChildAccount | None) -> Holds | None:
        """The hold file's keeper (:mod:`.holds`) for a single process's arms, where the machine's cores
        and the script's use of them in its measured window are known; None otherwise (a job's ranks
        switch together)."""
        measured = self.lines.measured
        cpu_count = account.env.cpu_count if account is not None else None
        if not self.config.hold_for_neighbours or self.on_window_done is None or self.link is not None or self.job.others \
                or not measured or not cpu_count:
            return None
        start, end = measured[0].t_start, measured[-1].t_end
        ticks = [(s["t"], s["cpu_percent"]) for s in self.sampler.samples if s["t"] <= end and s["cpu_percent"] == s["cpu_percent"]]
        inside = [cpu for t, cpu in ticks if t >= start]
        used = inside if len(inside) >= MIN_TICKS else [cpu for _, cpu in ticks[-MIN_TICKS:]]  # a short window: the ticks nearest its end
        if not used or self.config.arms_budget_s is None:
            return None
        return Holds(self.out / self.shape.names.hold, cpu_count, sum(used) / len(used) / 100, self.config.arms_budget_s)

    def _held(self, line: Held) -> None:
        """The child holds a window's start (its end None), or held it for `line.seconds`."""
        if line.end is None:
            self.stops.hold(time.monotonic())
            if self.holds is not None:
                self.holds.child_waits(time.monotonic())
            return
        self.stops.release(line.seconds)
        if self.holds is not None:
            self.holds.child_held(line.seconds)

    def _arms(self) -> None:
        """The arms' rounds across the job's ranks: the next plan once every rank ended the last
        round; every rank stopped once one rank's arm failed."""
        job, link, out, names = self.job, self.link, self.out, self.shape.names
        job.poll(out)
        if link is not None:
            link.poll()
            job.failed = job.failed or link.failed
        if (self.next_round is not None and self.on_window_done is not None and job.ended(self.next_round - 1)
                and (link is None or link.ended(self.next_round - 1))):  # (next_round: set only with on_window_done)
            if self.next_round > 0:  # the round's samples, for its windows' load (a burst of another process's)
                self.sampler.write_csv(out / names.samples_csv)
            if more_s := self.on_window_done(self.next_round, job.suffixes, self.lines):
                self.stops.lengthen_budget(more_s)
            self.next_round = None
        if job.failed and (job.others or link) and self.stops.sent_at is None:
            # one rank's arm raised (out of memory, say): the others would wait for it in a collective
            self.notes.append(f"the in-process experiments ended early, {job.failed}; the other ranks were stopped")
            self._ask_ranks_to_stop()
            self.stops.politely(time.monotonic())
        if link is not None and link.stop_asked and self.stops.sent_at is None:  # rank 0 stopped the job's arms
            job.failed = "rank 0 stopped the job's arms"
            (out / names.stop).touch()
            self.stops.politely(time.monotonic())

    def _show(self, lines: list[Line]) -> None:
        steps = [x for x in lines if isinstance(x, StepLine)]
        if self.progress is not None and steps:
            last = steps[-1]
            if last.phase == Phase.MEASURE:
                self.progress.update(Phase.MEASURE, last.index + 1, self.config.steps)
            else:
                self.progress.update("warmup", last.index + last.warmup + 1, last.warmup)

    def _ask_ranks_to_stop(self) -> None:
        """Every rank's stop file (the child stops at its next step boundary), and a job a launcher
        started told over its channel."""
        for files in (self.shape.names, *self.job.others.values()):
            (self.out / files.stop).touch()
        if self.link is not None:
            self.link.stop_job()

    # --- the end ---

    def _end(self) -> None:
        """The child ended (or advise gives up on it): nothing of the script outlives the run."""
        child, stop, out = self.child, self.stop, self.out
        if self.holds is not None:
            self.holds.end()
        if child.poll() is None:
            self._signal(signal.SIGKILL)
        child.wait()
        self.shape.child_ended(self.stops.stopped, GRACE_S)
        self._signal(signal.SIGKILL)  # orphaned DataLoader workers share the group
        try:  # helpers outside the group (start_new_session=True) would outlive the run
            self.escaped = self.tree.end_escaped(HELPERS_GRACE_S, hurry=lambda: stop is not None and stop.hurry)
        except Exception as exc:  # noqa: BLE001 - never lose the run over this clean-up
            self.notes.append(f"processes the script started outside its group were not checked: {type(exc).__name__}: {exc}")
        finally:
            self.giving_up.__exit__(None, None, None)
            self.tree.__exit__(None, None, None)
        self.sampler.stop()
        self.notes.extend(self.sampler.notes)
        self.sampler.write_csv(out / self.shape.names.samples_csv)
        self.cfg_path.unlink(missing_ok=True)
        self.shape.clean_up()

    def _result(self, wall_s: float) -> ProbeRun:
        """The child's account, completed by what the parent saw (how it ended, each rank's account)."""
        out, config, notes = self.out, self.config, self.notes
        parent = self.shape.settle()
        names, suffix = self.shape.names, self.shape.suffix
        probe = read_account(out / names.probe_json)
        lines = self.lines if self.lines.steps_path == out / names.steps_jsonl else lines_of(out, names)  # (settled)
        lines.read()
        records, measured = lines.window, lines.measured
        if probe is None:  # a child killed at the deadline never wrote probe.json: its step lines still tell
            probe = ChildAccount(boundaries=len(records), measured_steps=len(measured),
                                 step_source=records[-1].source if records else None)
        if parent and parent.status == "failed" and probe.status in ("done", "finished"):
            probe.status, probe.error, probe.traceback = "failed", parent.error, parent.traceback
        write_steps_csv(out / names.steps_csv, measured, probe.losses)
        ranks = self.shape.accounts()
        layout.end_exchange(out, names)

        if self.link is not None:
            notes.extend(self.link.notes)
        stops = self.stops
        if self.job.failed and (self.job.others or self.link) and not stops.stopped and len(measured) >= config.steps:
            # the ranks were stopped after their window, by advise: the window and the arms measured stand
            probe.status, probe.error, probe.traceback = "done", None, None
            ranks = [dict(r, status="done", error=None, traceback=None) if r["status"] in ("interrupted", "died") else r
                     for r in ranks]
        budget_ended = stops.budget_ended
        if budget_ended and len(measured) >= config.steps:  # stopped by advise after its window: the window stands
            if probe.status in ("interrupted", None) or self.child.returncode:
                probe.status, probe.error, probe.traceback = "done", None, None
            ranks = [dict(r, status="done", error=None, traceback=None) if r["status"] in ("interrupted", "died") else r
                     for r in ranks]
        status = _status(probe, self.child.returncode, stops.timed_out, stops.interrupted, config.timeout_s, stops.signum)
        status = _first_failure(status, probe, ranks)
        return ProbeRun(status=status, exit_code=self.child.returncode, wall_s=wall_s, probe=probe, files=names,
                        notes=notes, signal=stops.signum if status == "interrupted" else None, escaped=self.escaped,
                        arms=lines, suffix=suffix, ranks=ranks, budget_ended=budget_ended)


def _first_failure(status: str, probe: ChildAccount, ranks: list[dict]) -> str:
    """A job's status: the first rank to fail is the cause; the others broke on it."""
    failed = sorted((r for r in ranks if r["status"] not in ("done", "finished")), key=lambda r: r["ended_at"])
    if failed and status in ("ok", "failed"):
        first, then = failed[0], failed[1:]
        status = "failed"
        probe.error = f"rank {first['rank']} failed first: {first['error'] or first['status']}" + "".join(
            f"; then rank {r['rank']}: {(r['error'] or r['status'])[:120]}" for r in then)
        probe.traceback = first.pop("traceback", None) or probe.traceback
    for r in ranks:
        r.pop("traceback", None), r.pop("ended_at", None)
    return status


class _JobArms:
    """The arms of a job's ranks: every rank runs the same plans, rank `judged`'s steps are judged.

    Round N + 1 is written once every rank has ended round N (a rank behind would otherwise find
    round N + 1's plan in place of round N's); `failed` names a rank whose arm raised.
    """

    def __init__(self, judged: str, others: Iterable[int]) -> None:
        self.others = {r: layout.names(f".rank{r}") for r in others}
        self.suffixes = [judged, *(f".rank{r}" for r in self.others)]  # the judged rank first
        self._lines: dict[int, RankLines] = {}
        self._ended = {r: -1 for r in self.others}  # the last round each rank ended
        self.failed: str | None = None

    def poll(self, out: Path) -> None:
        for r, files in self.others.items():
            lines = self._lines.setdefault(r, lines_of(out, files))
            for line in (x for x in lines.read() if isinstance(x, PlanDone)):
                self._ended[r] = max(self._ended[r], line.round)
                if line.error:
                    self.failed = self.failed or f"rank {r}: {line.error}"

    def ended(self, round_no: int) -> bool:
        """Every other rank has ended round `round_no` (-1: the window, which needs no wait)."""
        return round_no < 0 or all(done >= round_no for done in self._ended.values())


def _status(probe: ChildAccount, returncode: int | None, timed_out: bool, interrupted: bool, timeout_s: float,
            signum: int | None = None) -> str:
    if timed_out:
        seen = "" if probe.boundaries else " with no training step seen (call advisor.step() in a loop the probe cannot see)"
        probe.error = f"timed out after {timeout_s:g} s{seen}"
        return "timeout"
    if interrupted:
        probe.error = f"interrupted ({describe(signum)})"
        return "interrupted"
    child_status = probe.status
    if child_status is None:  # died without a word: a signal (OOM killer, segfault)
        sig = -returncode if returncode and returncode < 0 else None
        probe.error = f"the script's process was killed by signal {signal.Signals(sig).name}" if sig else f"the script's process exited with status {returncode} before writing its results"
        return "failed"
    if child_status == "failed":
        return "failed"
    if child_status == "interrupted":
        probe.error = probe.error or "interrupted"
        return "interrupted"
    if probe.measured_steps == 0:
        boundaries = probe.boundaries
        if boundaries:
            probe.error = (
                f"the script ended after {max(0, boundaries - 1)} steps, before the warm-up finished; "
                "lower --warmup or let it run longer"
            )
        else:
            probe.error = (
                "no training steps seen: no torch.optim optimizer stepped, no DataLoader batch and no "
                "backward() ran; call advisor.step() at the end of each iteration"
            )
        return "no-steps"
    return "ok"
