"""An arm's result, read from the rounds' windows: each pass between its own baselines, pooled
(:func:`judge.pool`), with its one-off switch cost and what recompiled; and a sweep's winner, held
head to head against the values it leads."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import pandas as pd

from .. import overrides as vocabulary
from ..analysis import steptime
from ..model import Experiment, Verdict
from ..run_dir.protocol import ArmLine
from . import judge, recompiles
from .arms import Arm, Outcome, RoundResult, Unmeasured
from .plan import BASELINE, Candidate


@dataclass
class Reading:
    """The rounds' reader (`arms` and `results` are the rounds' own, read as they grow)."""

    run_dir: Path
    arms: dict[str, Arm]
    results: dict[int, RoundResult]
    by_samples: bool
    loads_in_process: bool  # the script loads its batches in its own process (no loader workers)
    why_not_started: Callable[[str], str | None]
    window: pd.DataFrame = field(default_factory=pd.DataFrame)  # the measured window's steps (or the quiet one's: .look)

    def outcome(self, results: list[RoundResult], arm: str) -> Outcome:
        """`arm`'s result over its windows in `results` (each pass between its own baselines, pooled
        by :func:`judge.pool`), or why there is none. Its one-off switch cost (a compilation) counts
        every round's."""
        lines = _arm_lines(results, arm)
        if refused := [line for line in lines if line.not_switchable]:
            return Unmeasured(next(iter(refused[0].reasons.values()), "it could not be switched in the running script"),
                              switchable=False)
        passes = [p for result in results for p in result.pairs(arm, self.run_dir)]
        busy = not passes and bool(lines) and any(r.busy for r in results)
        if busy:  # no window it can be compared with: its figures from the disturbed ones, never verified
            passes = [p for result in results for p in result.pairs(arm, self.run_dir, busy_too=True)]
        if not passes:
            return Unmeasured(self.why_not_started(arm) or "the run ended before its windows")
        pooled = judge.pool(passes, by_samples=self.by_samples, check_loss=self.arms[arm].candidate.changes_numerics,
                            measured_by="in-process", loads_in_process=self.loads_in_process,
                            bound_with=self._quiet_baselines())
        if busy:
            pooled.verified = False
            # either way: beside a burner tiny-gpt's fused AdamW read "slower" at 0.01x, 1.20x by hand beside it
            pooled.verdict = Verdict.NOT_CONFIRMED if pooled.verdict in (Verdict.FASTER, Verdict.SLOWER) else pooled.verdict
            pooled.reason = ("every window of it, or the baseline windows beside them, ran while other processes used the CPU: "
                             "run again on a quiet machine to verify")
        every = _arm_lines(self.results.values(), arm) or lines
        pooled.switch_s = sum(line.switch_s for line in every) or None
        pooled.payoff_steps = judge.payoff_steps(pooled)
        pooled.recompiles = recompiles.summary(every)
        return pooled

    def _quiet_baselines(self) -> list[pd.DataFrame]:
        """The baseline's steps no neighbour disturbed: its quiet windows over every round, and the
        measured window (a fix's bound is read on these too, :func:`judge.amdahl_bound`)."""
        frames = [f for r in self.results.values() for line in r.windows
                  if line.arm == BASELINE and (f := r.judged(line.window)) is not None and line.window not in r.busy
                  and line.window not in r.shared] + [self.window]
        return [f for f in frames if not f.empty and not steptime.loader_started(f).any()]  # an epoch's start: its own

    def sweep_winner(self, results: list[RoundResult], tried: list[tuple[str, Candidate, Experiment]],
                      budget: float | None) -> tuple[Experiment, str | None]:
        """A sweep's value to report, picked honestly: the best of several noisy estimates is biased
        up (a loader's 8 workers read 3.46x in one run, 2.32x by hand, where 4 gave 3.40x), so the
        leader is held head to head against every other verified value (their windows compared
        directly, :func:`judge.head_to_head`). The values it cannot be told apart from and whose
        figure is near its own (:func:`judge.near`) tie with it, and the cheapest of them (fewer
        workers, a smaller batch: :func:`vocabulary.cost`; else the first tried, TF32 before bf16) is
        reported, with a line saying so (the second item); a value it cannot be told apart from but is
        not near leaves it the answer, with a line saying the windows did not resolve them."""
        values = [(point, exp) for _, point, exp in tried]
        point, best = judge.sweep_winner(values, budget)
        if budget or not best.verified:
            return best, None
        lead = next(arm for arm, p, _ in tried if p is point)
        rivals = [(arm, p, e) for arm, p, e in tried if e.verified and p is not point]
        windows = lambda arm: [m for r in results for _, cands in r.pairs(arm, self.run_dir) for m in cands]  # noqa: E731
        bases = judge.distinct([m for r in results for around, _ in r.pairs(lead, self.run_dir) for m in around])
        unresolved = [(arm, p, e) for arm, p, e in rivals
                      if not judge.head_to_head(windows(lead), windows(arm), bases, by_samples=self.by_samples)]
        tied = [(arm, p, e) for arm, p, e in unresolved if judge.near(e, best)]
        if not tied:
            if not unresolved:
                return best, None
            said = ", ".join(f"{_short(p)} {e.speedup:.2f}x" for _, p, e in unresolved)
            return best, (f"{self.arms[lead].candidate.label}: {_short(point)} ({best.speedup:.2f}x) leads, though this run's "
                          f"windows could not tell it apart head to head from {said}")
        order = [p for _, p, _ in tried]
        cheapest = min([(lead, point, best), *tied], key=lambda t: (vocabulary.cost(t[1].overrides), order.index(t[1])))
        said = ", ".join(f"{_short(p)} {e.speedup:.2f}x" for _, p, e in [(lead, point, best), *tied])
        return cheapest[2], (f"{self.arms[lead].candidate.label}: its best values could not be told apart head to head "
                             f"({said}); alone, the cheapest is taken: {_short(cheapest[1])}")


def _short(point: Candidate) -> str:
    """A sweep value in a few words: what its label's brackets say (`num_workers=4`)."""
    return point.label.rsplit(" (", 1)[-1].rstrip(")") if point.label.endswith(")") else point.label


def _arm_lines(results: Iterable[RoundResult], arm: str) -> list[ArmLine]:
    """The child's lines of `arm`'s windows in these rounds."""
    return [line for result in results for line in result.windows if line.arm == arm]

