"""What an arm is worth measuring: the gain its rule expects, how sure that is, over the seconds its
windows are predicted to take (compiling included). The budget is spent in that order: a small
transformer's default run spent 45 s compiling for a screen that measured 0.99x while bf16, decided
in its first windows, was worth 1.55x; an H200's compile modes took the budget before the batch
ladder was reached."""

from __future__ import annotations

from dataclasses import dataclass

from .. import overrides as vocabulary
from ..model import Finding, estimated_speedup
from .judge import over_budget

# The first compilation's seconds before one was measured in this run (then the measured one
# stands for the rest): 31-45 s for a small GPT on a 2-core CPU, 12-17 s per mode for imagenet's
# ResNet on an H200. A prior, said as such where it decides.
COMPILE_PRIOR_S = {"cpu": 40.0, "cuda": 15.0}
SCREEN_TRUST = 0.5     # a fix no rule asked for: half the weight of one a rule's evidence proposes
UNKNOWN_GAIN = 0.10    # a fix whose rule gave no estimate: a 1.1x guess
# A fix for a peak over the memory budget the user gave answers what was asked whatever its speed
# (checkpointing trades speed for memory): it counts as a 2x, ahead of the speed fixes.
OVER_BUDGET_GAIN = 1.0


@dataclass(frozen=True)
class Worth:
    """An arm's expected gain (speedup - 1, weighted by trust) and its predicted seconds."""

    gain: float
    seconds: float
    compile_s: float = 0.0  # of `seconds`, compiling

    @property
    def density(self) -> float:
        """Expected gain per second of measuring: the order the budget is spent in."""
        return self.gain / max(self.seconds, 1e-3)


def expected_gain(finding: Finding) -> float:
    """The rule's estimate as a gain over 1 (0.55 for 1.55x; UNKNOWN_GAIN without one), weighted by
    how sure it is: a screen (no rule's threshold met, its estimate from the profile or a guess)
    counts SCREEN_TRUST of it."""
    if over_budget(finding):
        return OVER_BUDGET_GAIN
    speedup = estimated_speedup(finding.estimated_gain_frac)
    if speedup:
        gain = speedup - 1.0
    elif finding.screen and finding.estimated_gain_frac is not None:  # its profile supports none (bf16 where
        gain = 0.0                                                    # no GEMM is large enough): it comes last
    else:  # a rule's own fix keeps the guess: DL001's model can read 0 on a loop it starves
        gain = UNKNOWN_GAIN
    return gain * (SCREEN_TRUST if finding.screen else 1.0)


def compile_seconds(overrides: dict, device: str, measured_s: float | None) -> float:
    """The compilation an arm pays once: the one this run measured, else the device's prior."""
    if not vocabulary.one_off(overrides):
        return 0.0
    return measured_s if measured_s else COMPILE_PRIOR_S.get(device.split(":")[0], COMPILE_PRIOR_S["cpu"])


def arm_step_s(finding: Finding, overrides: dict, step_s: float) -> float:
    """The step an arm of `overrides` is expected to take, from the baseline's `step_s`: a k times
    larger batch's k times as long, a fix its rule expects s times faster 1/s as long."""
    return step_s * vocabulary.batch_scale(overrides) / (estimated_speedup(finding.estimated_gain_frac) or 1.0)


def worth(finding: Finding, overrides: dict, *, steps: int, warmup: int, base_steps: int, step_s: float,
          device: str, measured_compile_s: float | None, per_baseline: int) -> Worth:
    """An arm of `overrides` answering `finding`: its window (`warmup` + `steps` at the step time
    the rule expects: a k times larger batch's steps take k times longer, a fix expected s times
    faster 1/s as long), its share of the baseline windows beside it, and its compilation."""
    arm_step = arm_step_s(finding, overrides, step_s)
    compile_s = compile_seconds(overrides, device, measured_compile_s)
    seconds = (warmup + steps) * arm_step + base_steps * step_s / per_baseline + compile_s
    return Worth(expected_gain(finding), seconds, compile_s)
