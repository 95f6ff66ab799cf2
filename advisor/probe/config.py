"""What the parent asks of one probed run (the script, its steps, the run dir, the limits), read
by the runner and the job's shapes alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# The arms' default time: this many times the run's own way to its profiled window (advise's start-up and the script's,
# warm-up, measured steps, the trace's export), within the floor and the cap below, so a default
# run ends within 2.5x its --no-experiments time: that run is the way to the window and then its
# diagnosis and report, which a default run pays inside the budget, so 1 + 1.35 is the most it can
# take, and the way to the window moves 10-20% between runs on a shared host (at 1.75 a
# loader-starved script whose arms used their whole budget took 2.68x; at 1.5, once rounds stopped
# opening on a baseline of their own and spent their whole budget, adder and chargpt read 2.56x and
# 2.66x beside a diagnosis that ran fast). A small transformer's run took 5x with a fixed 900 s,
# nearly half of it compiling for an arm that changed nothing; an H200's nanoGPT outlived a 531 s call.
AUTO_BUDGET_FACTOR = 1.35
# The floor holds the same bar: a fast script still gets its rules' fixes measured, but no more than
# the factor would give a script that reaches its window in 3.7 s (at 10 s, nanoGPT evaluating every
# 10 steps, 5.4 s to a diagnosis, spent its whole floor and took 2.67x; at 5 s, 2.0-2.1x, bf16 verified
# as before, and the other fast cases' recommendations unchanged: benchmarks/README).
AUTO_BUDGET_MIN_S = 5.0
AUTO_BUDGET_MAX_S = 240.0  # a slow start-up (a big model, a dataset loaded whole) does not buy an hour


def auto_arms_budget(to_window_s: float) -> float:
    """The arms' time budget when none was given: AUTO_BUDGET_FACTOR times `to_window_s`, the
    seconds from the script's start to its profiled window's end, within the floor and the cap."""
    return min(AUTO_BUDGET_MAX_S, max(AUTO_BUDGET_MIN_S, AUTO_BUDGET_FACTOR * to_window_s))


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
    # hold the arms' windows while a neighbour takes the script's cores (probe/holds.py); the gate's
    # duet takes its own turns between its two sides, each the other's neighbour
    hold_for_neighbours: bool = True
    plan_timeout_s: float = 600.0  # how long the child waits for a plan before it finishes
    # the arms' time, from the "window-done" line: its end stops them, not a timeout. None: auto
    # (auto_arms_budget), set here by the runner at the window's end, where the session reads it
    arms_budget_s: float | None = None
    # when the advise command started (time.monotonic): the automatic budget's way to the window counts
    # from there, since a --no-experiments run pays that start too (None: from the script's start)
    since: float | None = None
    nproc: int = 1  # ranks started through torch.distributed.run (--standalone: a free rendezvous port)
    memory_budget_bytes: int | None = None  # --memory-budget (None: the device's capacity)
    cwd: str | None = None  # the script's working directory (None: advise's): a gate's side runs in its checkout
    env: dict[str, str] = field(default_factory=dict)  # set over advise's environment for the script
