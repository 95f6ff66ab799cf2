"""The parent-child protocol: the lines the child writes and the parent reads, in one place.

The child appends one JSON object per line to ``steps{r}.jsonl`` (every step, with its
``phase``) and ``arms{r}.jsonl`` (one per arm window); the parent reads them while the child runs,
whole lines only, from where it stopped. The phases:

- ``startup``, ``warmup``, ``profiler-warmup``, ``measure``: the profiled run's own steps;
- ``window-done``: the measured window is over and the child waits for a plan (``plan{r}.json``);
- ``arm``: a step of an arm window (its round, window and arm);
- ``plan-done``: a plan's last window ended (with ``error`` when an arm failed).

Before all of them, the parent writes the child's config (:class:`ChildConfig`,
``.probe-config{suffix}.json``): :func:`write_config` is its one writer, :func:`read_config` its
one reader (the bootstrap, and ranks the script starts, which read it and write their own).
After them, the child leaves its account (:class:`ChildAccount`, ``probe{r}.json``; also written
when its window ends, before the arms): :func:`write_account` and :func:`read_account`.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import IO, Optional

import msgspec

from advisor.run_dir.atomic import write_json_atomic


class Phase(str, Enum):
    STARTUP = "startup"
    WARMUP = "warmup"
    PROFILER_WARMUP = "profiler-warmup"
    MEASURE = "measure"
    WINDOW_DONE = "window-done"
    ARM = "arm"
    PLAN_DONE = "plan-done"

    def __str__(self) -> str:
        return self.value


# A step line's timing columns, as steps.csv keeps them (the clock writes them: advisor/probe/clock.py;
# duration_s is on the step's `clock`, host_s on the host's: advisor/probe/timeline.py)
STEP_COLUMNS = ("index", "t_start", "t_end", "duration_s", "host_s", "cpu_s", "clock", "data_wait_s", "optimizer_s",
                "backward_s", "samples", "profiled", "source")

WINDOW_PHASES = (Phase.STARTUP, Phase.WARMUP, Phase.PROFILER_WARMUP, Phase.MEASURE)  # the profiled run's own steps


def write_line(sink: IO[str], record: dict) -> None:
    """One record, one line, flushed: the parent may read it at once."""
    sink.write(json.dumps(record) + "\n")
    sink.flush()


def read_lines(path: Path, offset: int = 0) -> tuple[list[dict], int]:
    """The whole lines written after byte `offset` and the offset after them (a line still being
    written is read next time). A missing file has no lines yet."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n") + 1
    lines = []
    for line in chunk[:end].splitlines():
        try:
            lines.append(json.loads(line)) if line.strip() else None
        except ValueError:
            continue  # a line torn by a crash mid-write: the rest still counts
    return lines, offset + end


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
    env: dict = {}
    observed: dict = {}  # hooks.Observed.to_dict(): optimizers, DataLoaders, zero_grad calls
    memory: dict = {}  # probe.memory's account of the window
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


def write_account(path: Path, account: ChildAccount) -> None:
    write_json_atomic(path, msgspec.structs.asdict(account))


def read_account(path: Path) -> Optional[ChildAccount]:
    """The account at `path`; None when the child wrote none (killed, or crashed in C++) or it is
    unreadable. NaN losses are valid here (Python's JSON writes them)."""
    try:
        data = json.loads(Path(path).read_text())
        return msgspec.convert(data, ChildAccount, strict=False) if isinstance(data, dict) else None
    except (OSError, ValueError, msgspec.ValidationError):
        return None


def rank_account(rank: int, account: Optional[ChildAccount], measured_steps: int, ended_at: float,
                 arm_windows: list[dict], status: Optional[str] = None) -> dict:
    """One rank of a job as the report lists it (schema: ``Rank``), from its account; `status`
    when the parent knows better (a rank advise stopped by a signal)."""
    row = {"rank": rank, "status": status or (account.status if account else None) or "died",
           "measured_steps": measured_steps,
           "error": account.error if account else "its process ended without writing its results (killed, or crashed in C++)",
           "traceback": account.traceback if account else None, "ended_at": ended_at}
    if arm_windows:  # in-process arms: the windows this rank ran with a fix switched on (the same on every rank)
        row["arm_windows_switched"] = sum(1 for w in arm_windows if w.get("applied"))
    return row
