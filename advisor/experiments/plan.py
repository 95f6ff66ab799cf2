"""What to measure: the candidates (one per distinct automatic fix), the values a sweep tries,
and the order of the windows an in-process round runs (their sizes: :mod:`.sizing`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from .. import overrides as vocabulary
from ..model import Applicability, Experiment, Finding, estimated_speedup
from ..run_dir.protocol import Window
from .sizing import MIN_WINDOW_STEPS

REPEATS = 2          # each arm is measured twice, the second pass in reverse order
ARMS_PER_BASELINE = 2  # arm windows between two baseline windows
BASELINE = "baseline"

@dataclass
class Candidate:
    """One override to measure, and the finding it answers (None for the stacked run)."""

    label: str
    overrides: dict
    applicability: Applicability = Applicability.SAFE
    finding_index: int | None = None
    ladder: list[dict] | None = None  # the fix's other values, measured with it as one sweep (Fix.ladder)
    why: str = ""  # a sweep's value: why it is tried (vocabulary.sweep_reason)

    def __post_init__(self) -> None:
        self.applicability = Applicability(self.applicability)

    def finding(self, findings: list[Finding]) -> Finding:
        """The finding it answers, of the `findings` it was drawn from (the stacked run answers none)."""
        if self.finding_index is None:
            raise TypeError(f"{self.label} answers no one finding")
        return findings[self.finding_index]

    @property
    def changes_numerics(self) -> bool:
        """Not a safe fix: its loss must stay finite and close to the baseline's."""
        return self.applicability is not Applicability.SAFE


def candidates_from(findings: list[Finding], safe_only: bool, *, after: bool = False) -> list[Candidate]:
    """One candidate per distinct automatic fix; unsafe ones only when allowed. `after`: instead, the
    fixes measured only stacked on a winning fix (:attr:`Finding.after`)."""
    out, seen = [], set()
    for i, finding in enumerate(findings):
        fix = finding.fix
        if not fix.automatic or not fix.overrides or bool(finding.after) is not after:
            continue
        if safe_only and fix.applicability is not Applicability.SAFE:
            continue
        key = repr(sorted(fix.overrides.items()))
        if key in seen:
            continue
        seen.add(key)
        label = f"{finding.rule} ({vocabulary.describe(fix.overrides)})" if finding.screen else finding.rule or f"fix {i}"
        out.append(Candidate(label, fix.overrides, fix.applicability, i, fix.ladder))
    return out


def say_why_untried(findings: list[Finding], candidates: list[Candidate], safe_only: bool) -> None:
    """An automatic fix the experiments did not try gets a `not-measured` experiment saying why
    (a manual fix keeps none: there is nothing to inject)."""
    tried = {repr(sorted(c.overrides.items())): c.finding(findings) for c in candidates}
    for finding in findings:
        fix = finding.fix
        if finding.experiment is not None or not fix.automatic or not fix.overrides:
            continue
        other = tried.get(repr(sorted(fix.overrides.items())))
        if other is finding:
            continue  # a candidate: the experiments measure it
        if safe_only and fix.applicability is not Applicability.SAFE:
            reason = "--safe-only: this fix may change numerics, so it was not tried"
        elif other is not None:
            reason = f"the same change as {other.code or other.rule}'s fix, measured there"
        else:
            reason = "not tried"
        finding.experiment = Experiment.not_measured(reason)


def sweep_points(candidate: Candidate, ctx: vocabulary.SweepContext) -> list[Candidate]:
    """The values to try for knobs whose best value can't be known in advance (the vocabulary's
    ladders), the rule's proposal first, each with why it is tried."""
    points = vocabulary.sweep(candidate.overrides, ctx)
    points += [p for p in candidate.ladder or [] if p not in points]
    if len(points) == 1:
        return [candidate]
    return [Candidate(f"{candidate.label} ({_changed(candidate.overrides, p)})", p, candidate.applicability,
                      candidate.finding_index, why=vocabulary.sweep_reason(p, candidate.overrides, ctx)) for p in points]


def _changed(original: dict, point: dict) -> str:
    """`num_workers=4`: what a sweep point sets differently from the rule's proposal (or the point itself)."""
    for key, value in point.items():
        if isinstance(value, dict):
            diff = {k: v for k, v in value.items() if k == "num_workers" or original.get(key, {}).get(k) != v}
            return vocabulary.describe({key: diff})
        if key in original and original[key] != value or vocabulary.changes_batch({key: value}):
            return vocabulary.describe({key: value})
    return vocabulary.describe(point)


def expected_speedup(finding: Finding) -> int:
    """The rule's estimate as a whole speedup factor, 1 to 8 (model.estimated_speedup's): an arm
    expected k times faster gets k times a baseline window's steps, so both last about as long."""
    return max(1, min(8, round(estimated_speedup(finding.estimated_gain_frac) or 1)))


# the windows of an in-process round ---------------------------------------------------------------

def _groups(arms: list, size: int) -> list[list]:
    return [arms[i:i + size] for i in range(0, len(arms), size)]


def interleave(arms: list[tuple[str, dict]], warmup: Callable[[dict], int], steps: Callable[[str], int] | int,
               *, per_baseline: int = ARMS_PER_BASELINE, passes: int = REPEATS) -> list[Window]:
    """B A1 A2 B A3 A4 B ..., then the arms again in reverse (B A4 A3 B A2 A1 B): each arm window
    has a baseline window beside it and one a window further, on its other side, so a drift over the
    run weighs on both alike, and half as many baseline windows are run as with one arm per pair.
    `passes=1`: the first half alone (an adaptive plan runs the reverse pass only for the arms the
    first left undecided, see :func:`advisor.experiments.judge.settled`)."""
    length = steps if callable(steps) else (lambda arm: steps)
    base = lambda: Window(arm=BASELINE, overrides={}, warmup=warmup({}), steps=length(BASELINE))  # noqa: E731
    orders = [arms, list(reversed(arms))][:max(1, passes)]
    windows = [base()]
    for order in orders:
        for group in _groups(order, per_baseline):
            windows += [Window(arm=arm, overrides=overrides, warmup=warmup(overrides), steps=length(arm)) for arm, overrides in group] + [base()]
    return windows


def plan_windows(arms: list[tuple[str, dict]], growing: list[tuple[str, dict]], warmup: Callable[[dict], int],
                 steps: Callable[[str], int] | int, screens: Sequence[tuple[str, dict]] = (),
                 passes: int = REPEATS) -> list[Window]:
    """The round's windows: `arms` interleaved (see :func:`interleave`, `passes` times), then the
    `growing` ones (larger batches) smallest first, each `passes` times in a row between baselines,
    then the `screens` once each, in windows of half an arm's steps, two between baselines (what
    looks faster is measured in full in a later round). An out-of-memory error ends the child's
    arms, so it may only cost the values larger than the one that ran out and the screens: the
    rules' fixes and every smaller value have been measured by then."""
    length = steps if callable(steps) else (lambda arm: steps)
    short = max(MIN_WINDOW_STEPS, length(BASELINE) // 2)
    windows = interleave(arms, warmup, length, passes=passes) if arms else []
    if (growing or screens) and not windows:  # the baseline that opens them, as long as the one that closes them
        windows = [Window(arm=BASELINE, overrides={}, warmup=warmup({}), steps=length(BASELINE) if growing else short)]
    for arm, overrides in sorted(growing, key=lambda a: vocabulary.batch_scale(a[1])):
        for _ in range(max(1, passes)):
            windows += [Window(arm=arm, overrides=overrides, warmup=warmup(overrides), steps=length(arm)),
                        Window(arm=BASELINE, overrides={}, warmup=warmup({}), steps=length(BASELINE))]
    for group in _groups(list(screens), ARMS_PER_BASELINE):
        windows += [Window(arm=arm, overrides=overrides, warmup=warmup(overrides), steps=max(short, length(arm) // 2)) for arm, overrides in group]
        windows.append(Window(arm=BASELINE, overrides={}, warmup=warmup({}), steps=short))
    return windows
