"""The parent-child protocol: the lines the child writes and the parent reads, in one place.

Every line is a typed struct here, with one writer and one reader. The child appends one JSON
object per line to ``steps{r}.jsonl`` (every step, with its ``phase``: :data:`Line`) and
``arms{r}.jsonl`` (one :class:`ArmLine` per arm window); the parent reads them while the child runs,
whole lines only, from where it stopped (:class:`RankLines`). The phases:

- ``startup``, ``warmup``, ``profiler-warmup``, ``measure``: the profiled run's own steps;
- ``window-done``: the measured window is over and the child waits for a plan (``plan{r}.json``,
  :class:`Plan`);
- ``arm``: a step of an arm window (its round, window and arm);
- ``plan-done``: a plan's last window ended (with ``error`` when an arm failed);
- ``held``: the child held a window's start while the parent said a neighbour took the cores
  (``hold{r}``, :mod:`advisor.probe.holds`): once as it starts waiting, once with its end.

Before all of them, the parent writes the child's config (:class:`ChildConfig`,
``.probe-config{suffix}.json``): :func:`write_config` is its one writer, :func:`read_config` its
one reader (the bootstrap, and ranks the script starts, which read it and write their own).
After them, the child leaves its account (:class:`ChildAccount`, ``probe{r}.json``; also written
when its window ends, before the arms): :func:`write_account` and :func:`read_account`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import IO, Optional, Union

import msgspec

from advisor.run_dir.atomic import write_json_atomic
from advisor.run_dir.seen import Env, MemoryAccount, Observed


class Phase(str, Enum):
    STARTUP = "startup"
    WARMUP = "warmup"
    PROFILER_WARMUP = "profiler-warmup"
    MEASURE = "measure"
    WINDOW_DONE = "window-done"
    ARM = "arm"
    PLAN_DONE = "plan-done"
    HELD = "held"

    def __str__(self) -> str:
        return self.value


class StepTimes(msgspec.Struct, kw_only=True):
    """A step's span on both clocks and where its time went: the clock writes it
    (:meth:`advisor.probe.clock.ClosedStep.timing`). `duration_s` is on the step's `clock` (device or
    host), `host_s` on the host's (advisor/probe/timeline.py); `cpu_s` is the training process's CPU
    time over the step (all its threads, not its loader workers'). docs/explanation/steps.md says why.
    `t_device_end` places a device-timed step on the host's clock: when the device passed its end
    event, read at the window's one wait (its start is `t_device_end - duration_s`); the sampler's
    ticks are matched to that span, not to when Python queued the step."""

    t_start: float
    t_end: float
    duration_s: float
    host_s: float
    cpu_s: float
    clock: str  # device | host
    data_wait_s: float = 0.0
    optimizer_s: float = 0.0
    backward_s: float = 0.0
    samples: Optional[int] = None  # the step's batch (None: unknown)
    t_device_end: Optional[float] = None  # host clock; None where the host timed the step
    # evaluation passes and checkpoint saves inside the step (advisor.probe.phases), on the host's clock
    eval_s: float = 0.0
    evals: int = 0
    checkpoint_s: float = 0.0
    checkpoints: int = 0
    # training loaders whose iterator started in the step: an epoch began (its workers forked, or woken)
    loader_starts: int = 0
    # training loaders whose workers were shut down at their iterator's end in the step (an epoch ended)
    loader_end_s: float = 0.0
    loader_ends: int = 0


class StepLine(StepTimes, kw_only=True):
    """A step of the profiled run: start-up, warm-up, the profiler's warm-up or measured."""

    phase: Phase
    index: int  # among the measured steps (negative before them)
    profiled: bool = False  # recorded in the trace
    source: Optional[str] = None  # what ends a step: optimizer, dataloader, backward or explicit
    warmup: int = 0  # the warm-up steps, as lengthened so far


class ArmStepLine(StepTimes, kw_only=True):
    """A step of an arm window: its round, window and arm; `warm` when untimed (the window's warm-up).
    The loss is read after the window's one wait on the device; `loss_finite` tells a NaN loss from
    one not seen (JSON has no NaN)."""

    phase: Phase = Phase.ARM
    round: int
    window: int
    arm: str
    warm: bool = False
    index: int
    loss: Optional[float] = None
    loss_finite: Optional[bool] = None


class WindowDone(msgspec.Struct, kw_only=True):
    """The measured window is over: the child waits for a plan, from `t` on its clock (after the
    trace's export and probe.json, which the arms' time budget does not count)."""

    phase: Phase = Phase.WINDOW_DONE
    t: Optional[float] = None


class PlanDone(msgspec.Struct, kw_only=True):
    """A plan's last window ended, or an arm failed (`error`) and ended the plans."""

    phase: Phase = Phase.PLAN_DONE
    round: int = 0
    error: Optional[str] = None


class Held(msgspec.Struct, kw_only=True):
    """The child waits at a window's start for the parent's hold file to go (`end` None), or waited
    from `start` to `end` (its clock): the parent stops the arms' clock meanwhile."""

    phase: Phase = Phase.HELD
    start: float
    end: Optional[float] = None

    @property
    def seconds(self) -> float:
        return 0.0 if self.end is None else max(0.0, self.end - self.start)


Line = Union[StepLine, ArmStepLine, WindowDone, PlanDone, Held]  # a line of steps{r}.jsonl

# steps.csv's timing columns: a measured StepLine's, as Profile.steps and report.Step read them
STEP_COLUMNS = ("index", *StepTimes.__struct_fields__, "profiled", "source")


class CompileCounts(msgspec.Struct, kw_only=True):
    """What torch.compile did in an arm's window, from torch's own records
    (:class:`advisor.probe.compile_watch.CompileWatch`): a recompile costs a compilation inside the
    steps, and a shape that varies makes one; the reasons name the guard that failed."""

    steps: int = 0  # the window's steps, warm-up included
    graphs: int = 0  # graphs dynamo compiled in the window (a recompile's included)
    recompiles: int = 0  # frames compiled again because a guard failed
    recompiles_timed: int = 0  # of those, in the window's timed steps
    reasons: list[str] = []  # each recompile's failed guard, in order
    limit_hit: bool = False  # dynamo reached its recompile limit: that frame runs eagerly from then on
    cudagraph_records: int = 0  # CUDA graphs recorded (reduce-overhead: once more for each new input shape)
    cudagraph_records_timed: int = 0  # of those, in the timed steps: re-records
    cudagraph_skips: int = 0  # graphs inductor ran without CUDA graphs
    cudagraph_skip_reasons: list[str] = []


class ArmLine(msgspec.Struct, kw_only=True):
    """arms{r}.jsonl: one line per arm window, what really took effect (the child's Arms writes it)."""

    round: int
    window: int
    arm: str
    overrides: dict = {}
    applied: dict = {}  # what each override did (overrides.ineffective reads it)
    not_switchable: list[str] = []  # keys a live process cannot switch: a fresh run measures them
    reasons: dict[str, str] = {}  # why, per key
    switch_s: float = 0.0  # switching on and off, a compilation and a loader's rebuild included
    error: Optional[str] = None
    oom: bool = False
    peak_memory_bytes: Optional[int] = None
    memory_basis: Optional[str] = None
    peak_rss_hwm_bytes: Optional[int] = None
    compile: Optional[CompileCounts] = None  # what torch.compile did in the window (None: nothing)
    held_s: float = 0.0  # its start waited this long for a neighbour to leave the cores (Held)


OVERRUN = 2.0  # a window whose timed steps took this many times its `seconds` closes whatever its floor


class Window(msgspec.Struct, kw_only=True):
    """One window of a plan: `warmup` untimed then `steps` timed steps with `overrides` switched on.

    `seconds`: the child closes the window at a step boundary once its timed steps took that long and
    `min_steps` of them ran, whatever `steps` says (0: at `steps`), so an arm slower than the plan
    predicted cannot take the budget; and at OVERRUN times `seconds` whatever its floor: a neighbour
    that takes a core from a 2-thread step of 3.5 ms makes it 200-680 ms, and five of those took 3.4 s
    of a 5 s budget (the window is then set aside, and its replacement needs the time). A job's ranks
    close by `steps` alone (they switch together).

    `align`: the timed steps start with an epoch's first step (the script's loader started anew):
    the warm-up ends there, `warmup` steps at most, so every window of whole epochs meets the same
    number of epoch starts and drains no more than it must."""

    arm: str
    overrides: dict = {}
    warmup: int = 0
    steps: int = 0
    seconds: float = 0.0
    min_steps: int = 0
    align: bool = False


class Plan(msgspec.Struct, kw_only=True):
    """plan{r}.json: the windows of round `round`, written by the parent (or a job's rank 0, through
    the job's channel), read by the child at a step boundary. No windows: the arms end."""

    round: int = 0
    windows: list[Window] = []


def write_plan(path: Path, plan: Plan) -> None:
    write_json_atomic(path, msgspec.to_builtins(plan))


def read_plan(path: Path) -> Plan:
    """The plan at `path`; ValueError when it is not one (half written by a careless writer)."""
    try:
        return msgspec.json.decode(Path(path).read_bytes(), type=Plan)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ValueError(str(exc)) from exc


_encoder = msgspec.json.Encoder()
_head = msgspec.json.Decoder(type=WindowDone)  # any line: its phase alone (the other fields are skipped)
_decoders: dict[Phase, msgspec.json.Decoder] = {Phase.ARM: msgspec.json.Decoder(ArmStepLine), Phase.WINDOW_DONE: msgspec.json.Decoder(WindowDone),
             Phase.PLAN_DONE: msgspec.json.Decoder(PlanDone), Phase.HELD: msgspec.json.Decoder(Held)}
_step_decoder = msgspec.json.Decoder(StepLine)
_arm_decoder = msgspec.json.Decoder(ArmLine)


def write_line(sink: IO[str], line: Line | ArmLine) -> None:
    """One line, flushed: the parent may read it at once."""
    sink.write(_encoder.encode(line).decode() + "\n")
    sink.flush()


def _step_line(raw: bytes) -> Line:
    phase = _head.decode(raw).phase
    return _decoders.get(phase, _step_decoder).decode(raw)


def read_lines(path: Path, offset: int = 0, arms: bool = False) -> tuple[list, int]:
    """The whole lines written after byte `offset` and the offset after them (a line still being
    written is read next time): steps{r}.jsonl's (:data:`Line`), or with `arms` arms{r}.jsonl's
    (:class:`ArmLine`). A missing file has no lines yet."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n") + 1
    decode = _arm_decoder.decode if arms else _step_line
    lines = []
    for raw in chunk[:end].splitlines():
        try:
            lines.append(decode(raw)) if raw.strip() else None
        except (msgspec.ValidationError, msgspec.DecodeError):
            continue  # a line torn by a crash mid-write: the rest still counts
    return lines, offset + end


@dataclass
class RankLines:
    """One rank's lines, read once and incrementally while its child runs (the parent's one reader of
    steps{r}.jsonl and arms{r}.jsonl): the profiled run's steps, the arms' steps and windows."""

    steps_path: Path
    arms_path: Path
    window: list[StepLine] = field(default_factory=list)  # start-up to the window's end
    arm_steps: list[ArmStepLine] = field(default_factory=list)
    arm_windows: list[ArmLine] = field(default_factory=list)
    waited_from: float | None = None  # the child's clock as it began to wait for its first plan (WindowDone.t)
    held_s: float = 0.0  # the seconds its windows' starts were held for a neighbour (Held), so far
    _offsets: list[int] = field(default_factory=lambda: [0, 0])

    def read(self) -> list[Line]:
        """The new step lines (each also kept by kind); the new arm window lines are kept."""
        lines, self._offsets[0] = read_lines(self.steps_path, self._offsets[0])
        self.window += [x for x in lines if isinstance(x, StepLine)]
        self.arm_steps += [x for x in lines if isinstance(x, ArmStepLine)]
        self.waited_from = next((x.t for x in lines if isinstance(x, WindowDone)), self.waited_from)
        self.held_s += sum(x.seconds for x in lines if isinstance(x, Held))
        windows, self._offsets[1] = read_lines(self.arms_path, self._offsets[1], arms=True)
        self.arm_windows += windows
        return lines

    @property
    def measured(self) -> list[StepLine]:
        return [x for x in self.window if x.phase == Phase.MEASURE]


class ChildConfig(msgspec.Struct, kw_only=True):
    """What the child runs and how: the runner's ProbeConfig as the child needs it."""

    script: str  # a path, or with `module` a module name (python -m)
    args: list[str] = []
    module: bool = False
    out: str  # the run dir, absolute
    warmup: int
    steps: int
    profile_steps: int
    rank_suffix: Optional[str] = ""  # the child's files' suffix; None: a launched rank takes its own from its RANK
    overrides: dict = {}
    atexit_s: float = 5.0  # how long the script's atexit handlers may run once it was stopped
    arms: bool = False  # after the window, wait for plan files and measure the arms
    plan_timeout_s: float = 600.0  # how long to wait for a plan before finishing
    memory_budget_bytes: Optional[int] = None  # --memory-budget (None: the device's capacity)


def write_config(path: Path, config: ChildConfig) -> None:
    write_json_atomic(path, msgspec.structs.asdict(config))


def read_config(path: str | Path) -> ChildConfig:
    """The config at `path`; OSError when it is gone, ValueError when it is not one."""
    return msgspec.json.decode(Path(path).read_bytes(), type=ChildConfig)


class ChildAccount(msgspec.Struct, kw_only=True):
    """probe.json: the child's own account of the run, as the parent reads it."""

    status: Optional[str] = None  # finished | done | failed | interrupted (None: the parent's account of a child that wrote none)
    error: Optional[str] = None
    traceback: Optional[str] = None
    phase: Optional[Phase] = None  # window-done: written at the window's end, the arms follow
    step_source: Optional[str] = None  # optimizer, dataloader, backward or marker
    boundaries: int = 0  # step boundaries seen, warm-up included
    warmup: Optional[int] = None  # the warm-up it ran (lengthened for a DataLoader's prefetch)
    measured_steps: int = 0
    losses: list[Optional[float]] = []  # one per measured step (None: not seen)
    env: Env = msgspec.field(default_factory=lambda: Env.read({}))  # probe/env.py's
    observed: Observed = msgspec.field(default_factory=lambda: Observed.read({}))  # hooks.Observed.account()
    memory: MemoryAccount = msgspec.field(default_factory=lambda: MemoryAccount.read({}))  # the window's (probe/memory.py)
    trace: Optional[str] = None  # the trace's file name, when the window exported one
    profiler_error: Optional[str] = None
    profiler_cut: Optional[str] = None
    profiler_refused: Optional[str] = None  # what the profiler could not record (the device's activity, or anything)
    profiler_errno: Optional[int] = None
    profile_steps: Optional[int] = None
    overrides: dict = {}
    applied: dict = {}  # what each override did (overrides.ineffective reads it)
    arms_error: Optional[str] = None  # an arm raised after the window: the window's figures stand
    arms_traceback: Optional[str] = None


_SAID = ("env", "observed", "memory")  # the account's typed parts: each read alone, a field at a time


def write_account(path: Path, account: ChildAccount) -> None:
    data = msgspec.structs.asdict(account)
    write_json_atomic(path, {**data, **{name: data[name].record() for name in _SAID}})


def read_account(path: Path) -> Optional[ChildAccount]:
    """The account at `path`; None when the child wrote none (killed, or crashed in C++) or it is
    unreadable. NaN losses are valid here (Python's JSON writes them). Its env, observed and memory
    read as any version wrote them (:meth:`advisor.run_dir.seen.Said.read`)."""
    try:
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict):
            return None
        said = {name: data.pop(name, None) for name in _SAID}
        account = msgspec.convert(data, ChildAccount, strict=False)
    except (OSError, ValueError, msgspec.ValidationError):
        return None
    account.env, account.observed, account.memory = (Env.read(said["env"]), Observed.read(said["observed"]),
                                                     MemoryAccount.read(said["memory"]))
    return account


def rank_account(rank: int, account: Optional[ChildAccount], measured_steps: int, ended_at: float,
                 arm_windows: list[ArmLine], status: Optional[str] = None) -> dict:
    """One rank of a job as the report lists it (schema: ``Rank``), from its account; `status`
    when the parent knows better (a rank advise stopped by a signal)."""
    row = {"rank": rank, "status": status or (account.status if account else None) or "died",
           "measured_steps": measured_steps,
           "error": account.error if account else "its process ended without writing its results (killed, or crashed in C++)",
           "traceback": account.traceback if account else None, "ended_at": ended_at}
    if arm_windows:  # in-process arms: the windows this rank ran with a fix switched on (the same on every rank)
        row["arm_windows_switched"] = sum(1 for w in arm_windows if w.applied)
    return row
