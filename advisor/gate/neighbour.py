"""How busy the rest of the machine was while a gate's run was measured, and which rounds to set aside.

The probe samples the system's CPU and the script's own tree every 0.1 s (samples.csv); what other
processes used is their difference (:func:`advisor.analysis.metrics.outside_cores`), read here over
the run's measured window. Measured on the 2-core runner (unchanged MLP, 300 steps a run, CPU
burners on 1-4 s and off 0-3 s): the per-step load the sampler sees barely predicts a step's CPU time
(correlation 0.1: a neighbour slows a step through the shared core's caches and the hypervisor, at
a grain finer than the sampler's), and a whole run's load predicts its pair's spread only loosely
(correlation 0.5 with the busier run's load). So a round is set aside only where a neighbour took
nearly the whole machine (:data:`SET_ASIDE_SHARE` of its cores, on average over a run's window),
and only a few times a gate (:data:`MAX_SET_ASIDE`), while the gate's budget can pay for it
(:func:`advisor.gate.ab.run_ab`): beyond that the runner is simply busy, and the rounds are what
there is (unbounded, on a runner other jobs kept at 1.5-1.8 of 2 cores, it spent whole budgets).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..analysis import metrics
from ..run_dir import layout

SET_ASIDE_SHARE = 0.75  # other processes used this share of the cores over a run's window: its round is set aside
MAX_SET_ASIDE = 3  # rounds set aside (and replaced) per gate at most


def load(run_dir: str | Path, cpu_count: int | None) -> float | None:
    """Mean cores other processes used over the run's measured window; None where it was not sampled."""
    names = layout.names()
    try:
        steps = pd.read_csv(Path(run_dir) / names.steps_csv)
        samples = pd.read_csv(Path(run_dir) / names.samples_csv)
    except (OSError, ValueError):
        return None
    return metrics.outside_cores(metrics.window_samples(samples, steps), cpu_count)


def too_busy(loads: list[float | None], cpu_count: int | None, set_aside_so_far: int) -> str | None:
    """Why a round whose runs saw these `loads` is set aside, or None to keep it."""
    if not cpu_count or set_aside_so_far >= MAX_SET_ASIDE:
        return None
    busiest = max((x for x in loads if x is not None), default=None)
    if busiest is None or busiest < SET_ASIDE_SHARE * cpu_count:
        return None
    return (f"other processes used {busiest:.1f} of {cpu_count} cores while one of its runs was measured "
            f"({SET_ASIDE_SHARE:.0%} or more)")
