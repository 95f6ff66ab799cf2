"""How long each window is: its timed steps and the untimed steps that open it, for in-process arms
and fresh runs alike. A window must time the fix, not the noise: half a second at least, every
burst of a loader's workers, a larger batch's steps as long in total, and the warm-up a new loader
or a compiled model needs before its steps are the steady state."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from .. import overrides as vocabulary
from ..analysis import metrics, steptime
from ..profile import Profile
from ..run_dir.seen import Observed

MIN_WINDOW_STEPS = 5
# A measured window (a fresh run's, an arm's) lasts at least this long: ten 4.5 ms steps are a
# 45 ms window that one 6 ms hiccup of a shared machine moves by 13%, and two such fresh runs in a
# row passed a no-op off as a "verified" 1.13x. Half a second makes that hiccup 1%, under the bar
# a win must clear.
MIN_WINDOW_S = 0.5
MAX_STEPS_SCALE = 10  # ... in at most 10 times the steps asked for
BURSTS = 10           # a window whose loader has w workers times at least 10 bursts of w batches
# A loader that paces nothing: its batches are ready when asked for (the loop waits on them under
# this share of its steps) and its workers barely compute (under this many cores), so neither its
# waits nor its workers' CPU come in bursts a window must average over. minGPT's chargpt (4 workers,
# data wait 1.7% of a 96 ms step, the workers 0.03 cores) had its windows stretched to 40 steps
# (4-6 s): its 20 s budget held three, and bf16 (1.36x by hand) verified in 1 run of 5.
IDLE_LOADER_WAIT = 0.05
IDLE_LOADER_CORES = 0.1


def window_steps(asked: int, steps: pd.DataFrame) -> int:
    """Timed steps for a window: `asked`, or as many as MIN_WINDOW_S takes at the pace of `steps`
    (the profiled window: :func:`steptime.pace`), whichever is more."""
    pace = steptime.pace(steps)
    if pace is None:
        return asked
    return min(asked * MAX_STEPS_SCALE, max(asked, math.ceil(MIN_WINDOW_S / pace)))


def batch_window(timed: int, asked: int, overrides: dict) -> int:
    """A window's steps for a fix that scales the batch k times: each step takes about k times as
    long, so the `timed` steps' duration takes 1/k of them (never fewer than `asked`)."""
    scale = vocabulary.batch_scale(overrides)
    return max(asked, math.ceil(timed / scale)) if scale > 1 else timed


def script_workers(observed: Observed) -> int:
    """The most workers any DataLoader the script built has (a profile's `observed`)."""
    return observed.max_workers


def pacing_workers(profile: Profile) -> int:
    """The script's loader workers whose bursts pace its steps: all of them (:func:`script_workers`),
    or none where its loader is idle (IDLE_LOADER_WAIT, IDLE_LOADER_CORES) by the profiled window.
    Where the sampler could not tell the workers' CPU apart, all of them."""
    workers = script_workers(profile.observed)
    timed, _ = steptime.timed_steps(profile.steps)
    wait = steptime.share(timed, steptime.DATA_WAIT)
    busy = metrics.workers_busy(profile.samples, profile.steps)
    idle = wait is not None and busy is not None and wait < IDLE_LOADER_WAIT and busy < IDLE_LOADER_CORES
    return 0 if workers and idle else workers


def epoch_steps(profile: Profile) -> int | None:
    """The steps of one epoch of the script's training loader, where its measured steps started one
    (:func:`steptime.loader_started`): an epoch short enough that a window meets its start. The gap
    between two starts, else the batches of the script's largest map-style dataset; None otherwise.
    pytorch/vision's train.py on a small ImageFolder forks its 16 workers anew every 20 steps: a
    window of 160 steps (every burst of 16 workers) took 13 s of a 19 s budget, and nothing was measured."""
    timed, _ = steptime.timed_steps(profile.steps)
    starts = [i for i, hit in enumerate(steptime.loader_started(timed)) if hit]
    if not starts:
        return None
    if len(starts) >= 2:
        return max(MIN_WINDOW_STEPS, starts[1] - starts[0])
    sizes = [math.ceil(d.dataset_len / d.batch_size) for d in profile.observed.dataloaders
             if d.dataset_len and d.batch_size and not d.iterable]
    return max(MIN_WINDOW_STEPS, max(sizes)) if sizes else None


def loader_workers(overrides: dict, script_workers: int) -> int:
    """The loader workers a window runs with: the fix's, else the script's own."""
    return int((overrides.get("dataloader") or {}).get("num_workers", script_workers) or 0)


def burst_steps(steps: int, overrides: dict, pacing: int) -> int:
    """Timed steps of a window whose loader has w workers: at least BURSTS * w. The batches come in
    bursts of w, and a window of a few bursts times its phase, not the loader (22x measured where
    9x is true with 5 bursts; a compile screen read 0.65-1.40x; two fresh runs of 8 workers read
    their 10 steps 1.5x apart). `pacing`: the script's own workers that pace its steps
    (:func:`pacing_workers`); a fix that sets the loader's workers is timed by its own."""
    return max(steps, BURSTS * loader_workers(overrides, pacing))


def warmup_steps(overrides: dict, script_workers: int, base: int = 2) -> int:
    """Untimed steps opening a window: a new loader's workers fill their prefetch first (its
    first burst drained, the window times the loader's pace); a compiled model's first steps may
    recompile (a guard on the grad mode, a new shape)."""
    dl = overrides.get("dataloader") or {}
    workers = loader_workers(overrides, script_workers)
    return (base + (workers * dl.get("prefetch_factor", 2) if "dataloader" in overrides or workers else 0)
            + vocabulary.extra_warmup(overrides))


@dataclass
class WindowSizing:
    """The windows of one run's in-process rounds: `asked` timed steps (--window-steps), `timed` once
    lengthened to half a second of the profiled steps; `lengths` the arms expected k times faster,
    whose windows get k times the steps (up to 8) so they last about as long as a baseline's and
    their intervals are as tight; `base_steps` a cut baseline window (every fix expected at least
    3x faster: the slow baseline's windows need half the steps)."""

    asked: int
    timed: int
    workers: int = 0  # the script's loader workers
    pacing: int = 0  # those of them whose bursts pace the steps (:func:`pacing_workers`)
    epoch: int | None = None  # steps per epoch, where a window meets an epoch's start (:func:`epoch_steps`)
    base_steps: int | None = None
    lengths: dict[str, int] = field(default_factory=dict)  # arm id -> window length, in baseline windows

    @classmethod
    def of(cls, asked: int, profile: Profile) -> "WindowSizing":
        """From the profiled window's steps, what the script built (its loaders' workers) and how
        busy they were."""
        return cls(asked, window_steps(asked, profile.steps), script_workers(profile.observed), pacing_workers(profile),
                   epoch=epoch_steps(profile))

    def steps(self, arm: str, overrides: dict, baseline: bool) -> int:
        unit = max(MIN_WINDOW_STEPS, batch_window(self.timed, self.asked, overrides))
        steps = (self.base_steps or unit) if baseline else unit * self.lengths.get(arm, 1)
        if self.epoch:  # whole epochs: each window meets as many epoch starts, and the bursts start anew in each
            return self.epoch * math.ceil(steps / self.epoch)
        return burst_steps(steps, overrides, self.pacing)

    def floor(self, overrides: dict) -> int:
        """The fewest timed steps a window closed in time keeps: MIN_WINDOW_STEPS, and every burst of
        its loader's workers (:func:`burst_steps`), or a whole epoch where epochs are short."""
        return self.epoch or burst_steps(MIN_WINDOW_STEPS, overrides, self.pacing)

    def warmup(self, overrides: dict) -> int:
        """A window that builds a loader (its workers set, or its batch scaled) fills all its workers'
        prefetch first; one on the script's own loader drains only that of the workers that pace the
        steps (:func:`pacing_workers`): an idle loader's batches are ready either way, and chargpt's
        10 untimed steps of draining 4 idle workers were half of every window's time."""
        rebuilt = "dataloader" in overrides or vocabulary.changes_batch(overrides)
        steps = warmup_steps(overrides, self.workers if rebuilt else self.pacing)
        return min(steps, self.epoch) if self.epoch else steps  # an epoch's end drains any prefetch
