"""Where one run's arms spend the time budget: what a window is predicted to take, which arms fit
what is left (the most expected gain per second first, :mod:`.worth`), what each arm cost, and the
fixes left out, each with its predicted cost and why."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import msgspec
import pandas as pd

from .. import overrides as vocabulary
from ..analysis import steptime
from ..model import Finding
from ..run_dir.protocol import Window
from .arms import Arm, Role, RoundResult, ran
from .plan import ARMS_PER_BASELINE, BASELINE
from .sizing import MIN_WINDOW_S
from .worth import Worth, arm_step_s, compile_seconds, worth

PLAN_MARGIN_S = 0.5  # a round's plan on its way to the child (written, polled, switched on)
# A window's seconds beyond its steps' (the switch, the sync that closes it, its lines read): chargpt's
# round 0 ran 0.6-0.7 s over its 5-6 windows' steps, enough to cut the reverse pass reserved for it.
WINDOW_OVERHEAD_S = 0.1
# A window closes at this many times its timed steps' predicted seconds (Window.seconds): an arm the
# plan thought 2x faster that runs 2x slower is cut at 1.5 baseline windows, not run for 4.
WINDOW_SLACK = 1.5


@dataclass
class Spend:
    """The time accounts of :class:`advisor.experiments.rounds.Rounds`' arms (`arms`, `findings` and
    `results` are the rounds' own, read as they grow; `steps` and `warmup` size an arm's window)."""

    arms: dict[str, Arm]
    findings: list[Finding]
    results: dict[int, RoundResult]
    steps: Callable[[str], int]
    warmup: Callable[[dict], int]
    step_s: float | None = None  # the profiled window's pace (steptime.pace): a window's time before its arm ran
    device: str = "cpu"
    left_out: dict[str, Worth] = field(default_factory=dict)  # arm -> its predicted cost: not started, it did not fit
    cut: int = 0  # windows planned but not run: the time budget ended first
    predicted: dict[tuple[int, int], float] = field(default_factory=dict)  # (round, window) -> its predicted seconds
    arms_from: float | None = None  # where the arms' time starts on the child's clock (Rounds.start)

    def fit(self, windows: list[Window], time_left_s: float | None) -> list[Window]:
        """`windows` as far as they fit `time_left_s`, group by group (the arms' windows up to the
        baseline window that closes them, with any baseline that opens them), in order; in the first
        group that does not fit whole, its arms that still fit, in their order (the plan's, the most
        promising first), then no more ([]: not even one arm with its baseline). The rest is counted
        as cut. minGPT's adder had 2.41 s left for batch x2 (1.15 s), 0 workers (0.52 s) and their
        baseline (0.79 s): a whole-prefix fit ran neither, and both went undecided in 5 runs of 5."""
        if time_left_s is None or not windows:
            return windows
        paces, compile_s = self.paces(), self.compile_s()
        cost = [self.window_s(w, paces, compile_s) for w in windows]  # at each arm's pace so far, else predicted
        out: list[Window] = []
        used, group = 0.0, list[int]()
        for k, window in enumerate(windows):
            if window.arm != BASELINE or all(windows[j].arm == BASELINE for j in group):
                group.append(k)  # an arm, or a baseline that opens the group
                continue
            kept = [j for j in group if windows[j].arm == BASELINE]
            spent = used + cost[k] + sum(cost[j] for j in kept)
            for j in (j for j in group if windows[j].arm != BASELINE):
                if spent + cost[j] <= time_left_s:
                    kept.append(j)
                    spent += cost[j]
            if spent > time_left_s or all(windows[j].arm == BASELINE for j in kept):
                break
            out += [windows[j] for j in sorted(kept)] + [window]
            used = spent
            if len(kept) < len(group):
                break
            group = []
        self.cut += len(windows) - len(out)
        return out

    def window_s(self, window: Window, paces: dict[str, float | None], compile_s: float | None) -> float:
        """A window's predicted seconds: its steps at its step time (:meth:`step_of`: its arm's pace
        so far, else the one its rule expects), an arm not yet run paying its compilation too
        (`compile_s`: the run's measured one, :meth:`compile_s`), and WINDOW_OVERHEAD_S for its way
        around the steps."""
        unmeasured = window.arm in self.arms and not ran(self.results.values(), window.arm)
        compiling = compile_seconds(window.overrides, self.device, compile_s) if unmeasured else 0.0
        return (window.warmup + window.steps) * self.step_of(window, paces) + compiling + WINDOW_OVERHEAD_S

    def timed(self, windows: list[Window], floor: Callable[[dict], int], round_: int, align: bool = False) -> list[Window]:
        """`windows` (round `round_`'s), each closed in time: at WINDOW_SLACK times its timed steps'
        predicted seconds (at least MIN_WINDOW_S) once `floor(overrides)` of them ran (a loader's
        bursts); each window's prediction is kept for :meth:`costs`."""
        paces, compile_s = self.paces(), self.compile_s()
        out = []
        for k, window in enumerate(windows):
            if align:  # whole epochs (`floor`'s unit), a screen's short window too
                unit = floor(window.overrides)
                window = msgspec.structs.replace(window, steps=unit * math.ceil(window.steps / unit))
            self.predicted[(round_, k)] = self.window_s(window, paces, compile_s)
            step = self.step_of(window, paces)
            seconds = max(MIN_WINDOW_S, WINDOW_SLACK * window.steps * step) if step else 0.0
            out.append(msgspec.structs.replace(window, seconds=round(seconds, 3), align=align,
                                               min_steps=min(window.steps, floor(window.overrides))))
        return out

    def step_of(self, window: Window, paces: dict[str, float | None]) -> float:
        """A window's step time: its arm's pace so far, else the one its rule expects (:mod:`.worth`)."""
        base = paces.get(BASELINE) or self.step_s or 0.0
        arm = self.arms.get(window.arm)
        if (step := paces.get(window.arm)) is not None or arm is None or arm.candidate.finding_index is None:
            return step or base
        return arm_step_s(arm.candidate.finding(self.findings), window.overrides, base)

    def paces(self) -> dict[str, float | None]:
        """Each arm's pace over the rounds measured so far (:func:`steptime.pace`), on the windows no
        neighbour disturbed: tiny-gpt's fused AdamW ran its one screen window at about 100 ms a step beside a
        burner (4.5 ms quiet), and its confirming pass, priced at that, did not fit the 4 s left. An arm
        with none is priced as one not yet run (its rule's expected step)."""
        frames: dict[str, list[pd.DataFrame]] = {}
        for r in self.results.values():
            for line in r.windows:
                frame = r.judged(line.window)
                if frame is not None and len(frame) and line.window not in r.busy and line.window not in r.shared:
                    frames.setdefault(line.arm, []).append(frame)
        return {arm: steptime.pace(pd.concat(parts)) for arm, parts in frames.items()}

    def worth_of(self, arm: str) -> Worth:
        """What `arm` is expected to gain, and to cost in seconds (:mod:`.worth`)."""
        point = self.arms[arm].point.overrides
        return worth(self.arms[arm].candidate.finding(self.findings), point, steps=self.steps(arm),
                     warmup=self.warmup(point), base_steps=self.steps(BASELINE) + self.warmup({}),
                     step_s=self.step_s or 0.0, device=self.device, measured_compile_s=self.compile_s(),
                     per_baseline=ARMS_PER_BASELINE)

    def choose(self, time_left_s: float | None) -> list[str]:
        """Round 0's arms, the most expected gain per second of measuring first; with a time budget,
        those whose predicted cost fits what is left (an arm predicted to outlast it is not started:
        :attr:`left_out` names it with its cost). A screen (a fix no rule proposed) fits only beside
        a second pass of the rules' fixes (:meth:`second_pass`): chargpt's bf16, undecided on one
        window, lost its reverse pass to three screens in 3 of 5 runs. Without a budget, every arm,
        in that order."""
        worths = {a: self.worth_of(a) for a, arm in self.arms.items() if arm.role is not Role.STACK}
        # a fix's values keep their sweep's order (the rule's proposal first) at its proposal's density:
        # a value's own would put the fewest workers first, their bursts being the shortest windows
        density: dict[int, float] = {}
        for a in worths:
            density.setdefault(id(self.arms[a].candidate), worths[a].density)
        order = sorted(worths, key=lambda a: -density[id(self.arms[a].candidate)])
        if time_left_s is None:
            return order
        used = self.baseline_s() + WINDOW_OVERHEAD_S  # the first baseline window
        kept: list[str] = []
        for screens in (False, True):
            for arm in (a for a in order if (self.arms[a].role is Role.SCREEN) == screens):
                reserve = self.second_pass(kept, worths) if screens else 0.0
                cost = worths[arm].seconds + WINDOW_OVERHEAD_S * (1 + 1 / ARMS_PER_BASELINE)
                if used + reserve + cost <= time_left_s:
                    kept.append(arm)
                    used += cost
                else:
                    self.left_out[arm] = worths[arm]
        return sorted(kept, key=order.index)

    def second_pass(self, kept: list[str], worths: dict[str, Worth]) -> float:
        """The predicted seconds (`worths`) of a reverse pass for the rules' fixes in `kept`: per fix,
        its two costliest values (a sweep's leaders are re-measured head to head; the rest are judged
        beaten, :func:`advisor.experiments.judge.beaten`), in a round of their own (P2 P1 B: the
        round before's closing baseline window opens it, one follows every ARMS_PER_BASELINE arms),
        its plan's way included."""
        base_s = self.baseline_s()
        per_fix: dict[int | None, list[float]] = {}
        for arm in kept:
            if self.arms[arm].role is not Role.SCREEN:
                own = worths[arm].seconds - base_s / ARMS_PER_BASELINE  # worth counts a baseline's share
                per_fix.setdefault(self.arms[arm].candidate.finding_index, []).append(own)
        again = [s for costs in per_fix.values() for s in sorted(costs)[-2:]]
        if not again:
            return 0.0
        baselines = math.ceil(len(again) / ARMS_PER_BASELINE)
        return sum(again) + baselines * base_s + (len(again) + baselines) * WINDOW_OVERHEAD_S + PLAN_MARGIN_S

    def baseline_s(self) -> float:
        """A baseline window's predicted seconds (its steps at the profiled window's pace)."""
        return (self.steps(BASELINE) + self.warmup({})) * (self.step_s or 0.0)

    def compile_s(self) -> float | None:
        """The longest compilation this run measured (an arm's switch cost), None before the first."""
        spent = [line.switch_s for r in self.results.values() for line in r.windows
                 if line.arm in self.arms and vocabulary.one_off(line.overrides) and line.switch_s]
        return max(spent) if spent else None

    def between_steps_s(self) -> float | None:
        """The arms' seconds between their windows' steps: from where the arms' time starts to the last
        window's end, less the windows' own (:meth:`costs`, the loop's phases left out). What the loop ran
        there (an evaluation, a checkpoint, the loader's restart at an epoch's end), the switches between
        windows and the child's wait while each round was planned: vision's reference script spent 8 s
        of a 16 s budget there. The windows' starts held for a neighbour (ArmLine.held_s) are not."""
        ends = self._window_ends(whole=True)
        if self.arms_from is None or not ends:
            return None
        held = sum(line.held_s for r in self.results.values() for line in r.windows)
        return max(0.0, max(ends) - self.arms_from - held - sum(row["seconds"] for row in self.costs()))

    def cut_window_s(self) -> float | None:
        """The seconds of a window the run ended inside (the budget's end: its steps ran, it was never
        closed, nothing reads them), after the last whole window's end."""
        whole, every = self._window_ends(whole=True), self._window_ends(whole=False)
        if not whole or not every or max(every) <= max(whole):
            return None
        return max(every) - max(whole)

    def _window_ends(self, whole: bool) -> list[float]:
        """Each window's last step's end over the rounds (:meth:`RoundResult.ends`)."""
        return [end for r in self.results.values() for end in r.ends(whole)]

    def costs(self) -> list[dict]:
        """Where the arms' time went: per arm (the baseline one of them), its windows, timed steps,
        seconds in all (timed, untimed and switching), the switching's share (a compilation, a
        loader's rebuild) and what the plan predicted of them, report.json's `experiments.arms`."""
        out: dict[str, dict] = {}
        for round_, result in self.results.items():
            for line in result.windows:
                frame = result.steps.get(line.window)
                label = self.arms[line.arm].point.label if line.arm in self.arms else line.arm
                row = out.setdefault(line.arm, {"arm": label, "windows": 0, "steps": 0, "seconds": 0.0, "switch_s": 0.0,
                                                "predicted_s": 0.0})
                row["windows"] += 1
                row["predicted_s"] += self.predicted.get((round_, line.window), 0.0)
                row["steps"] += len(frame) if frame is not None else 0
                row["switch_s"] += line.switch_s
                row["seconds"] += result.window_s(line)
        return sorted(out.values(), key=lambda r: -r["seconds"])

    def left_out_fixes(self) -> list[tuple[Finding, Worth]]:
        """The fixes none of whose values was started, each with its cheapest value's predicted cost."""
        by_finding: dict[int, list[tuple[str, Worth]]] = {}
        for arm, cost in self.left_out.items():
            index = self.arms[arm].candidate.finding_index
            if index is not None:
                by_finding.setdefault(index, []).append((arm, cost))
        started = {a.candidate.finding_index for arm, a in self.arms.items() if arm not in self.left_out}
        return [(self.findings[i], min((c for _, c in arms), key=lambda c: c.seconds))
                for i, arms in by_finding.items() if i not in started]

    def left_out_why(self, arm: str) -> str | None:
        """Why `arm` was never started: its predicted cost did not fit the time budget left, after the
        arms planned before it where there were any."""
        if arm not in self.left_out:
            return None
        cost = self.left_out[arm]
        compiling = f", {cost.compile_s:.0f} s of it compiling" if cost.compile_s else ""
        planned = [a for a, one in self.arms.items() if a not in self.left_out and one.role is not Role.STACK]
        if not planned:  # nothing went before it: the budget itself was short (less the first baseline window)
            return (f"not started: predicted to take {cost.seconds:.0f} s{compiling}, more than the time budget "
                    f"had left for measuring fixes")
        reserved = " and a second pass of the rules' fixes" if self.arms[arm].role is Role.SCREEN else ""
        return (f"not started: predicted to take {cost.seconds:.0f} s{compiling}, more than the time budget "
                f"had left once the fixes expected to gain more per second{reserved} were planned")
