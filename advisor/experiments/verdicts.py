"""The rounds' verdicts: what each round's windows decided, fix by fix (:mod:`.judge` gives every
verdict), and what the next round needs of it: the fixes the first pass left undecided, the screens
that looked faster, the winners to stack and, once they are settled, the recommendation.
:class:`advisor.experiments.rounds.Rounds` says which arms a round judges; this module judges them."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..model import Experiment, Finding, Recommendation, Verdict
from . import judge
from .arms import Arm, Role, RoundResult, Unmeasured
from .plan import Candidate
from .reading import Reading
from .spend import Spend

SCREEN_MARGIN = 0.05  # a screened fix whose one window may be this much faster is measured in full ...
SCREEN_LEAN = 1.02    # ... and that leans that way (its point estimate at least this): a 0.99x window whose
                      # interval reaches 1.05 only by its noise cost a full round for nothing (a starved loop's bf16)


@dataclass
class Verdicts:
    """The verdicts so far (`arms`, `findings`, `fresh` and `notes` are the rounds' own: the
    findings get their experiments in place, `fresh` the fixes left to fresh runs)."""

    arms: dict[str, Arm]
    findings: list[Finding]
    fresh: list[Candidate]
    notes: list[str]
    reading: Reading
    spend: Spend
    again: list[str] = field(default_factory=list)  # arms of fixes their first pass left undecided
    # a sweep's values its best already beats (:func:`judge.beaten`): judged with it, not measured again
    beaten: list[str] = field(default_factory=list)
    screened: dict[str, Experiment] = field(default_factory=dict)  # screened arm -> its one window's result
    promoted: list[str] = field(default_factory=list)  # screened arms to measure in full
    winners: list[tuple[Candidate, Experiment]] = field(default_factory=list)
    leaners: list[tuple[Candidate, Experiment]] = field(default_factory=list)  # settled faster-leaning, unverified
    after: list[tuple[Candidate, str]] = field(default_factory=list)  # fixes stacked on a winner of that override
    fit_budget: int | None = None  # the run was over this budget: the fastest fix that fits joined the winners
    recommended: Recommendation | None = None

    def recommend(self, stacked: Experiment | str | None) -> None:
        """The recommendation from the winners and their stack (`stacked`: its result, or why there is none)."""
        self.recommended = judge.recommend(self.winners, stacked, budget=self.fit_budget, notes=self.notes,
                                           leaners=self.leaners, after=self.after)

    def recommend_unstacked(self, ended: str) -> None:
        """The recommendation from the winners, their stack unmeasured because `ended` first."""
        self.recommend(None if len(self.stack_members()) < 2 else f"was not measured ({ended} first)")

    def stack_members(self) -> list[tuple[Candidate, Experiment]]:
        """What the stack measures (:func:`judge.stack_members`)."""
        return judge.stack_members(self.winners, self.leaners, self.after)

    def screens(self, result: RoundResult) -> None:
        """Each screened arm's one short window: an arm whose interval's high end reaches the
        screening margin (a short window is noisy: only a fix shown not to gain that much stops
        here) is promoted, to be measured in full, the fastest first (a budget that ends inside their
        passes has measured the one that looked best: minGPT's adder, four screens at a 7 s budget,
        ran out before a doubled batch, its best by hand); the rest keep this window's result."""
        for arm in (a for a, spec in self.arms.items() if spec.role is Role.SCREEN):
            exp = self.reading.outcome([result], arm)
            if not isinstance(exp, Experiment):
                continue
            self.screened[arm] = exp
            high = exp.ci_high if exp.ci_high is not None else exp.speedup or 0
            lean = (exp.speedup or 0.0) >= SCREEN_LEAN
            if high >= 1 + SCREEN_MARGIN and lean and (exp.loss_check is None or exp.loss_check.get("passed") is not False):
                self.promoted.append(arm)
                continue
            exp.verified = False
            # a loss that changed is the screen's answer; a window beside a neighbour alone answers nothing
            if exp.verdict not in (Verdict.LOSS_CHANGED, Verdict.NOT_CONFIRMED):
                exp.verdict = Verdict.SLOWER if exp.ci_high is not None and exp.ci_high < 1 else Verdict.NO_CHANGE
            self.arms[arm].candidate.finding(self.findings).experiment = exp
        self.promoted.sort(key=lambda a: -(self.screened[a].speedup or 0.0))

    def unjudged(self, ended: str) -> None:
        """The run ended (`ended`: how) with fixes unjudged: a promoted screen keeps its one window,
        not confirmed; every other fix still unjudged says why it was not measured."""
        for arm in self.promoted:
            finding = self.arms[arm].candidate.finding(self.findings)
            if finding.experiment is None and arm in self.screened:
                exp = self.screened[arm]
                exp.verified, exp.verdict = False, Verdict.NOT_CONFIRMED
                exp.reason = f"screened in one short window; {ended} before it was measured in full"
                finding.experiment = exp
        for candidate in self.candidates():
            finding = candidate.finding(self.findings)
            if finding.experiment is None and candidate not in self.fresh:
                arms = [a for a, arm in self.arms.items() if arm.candidate is candidate]
                left_out = self.spend.left_out
                why = self.spend.left_out_why(arms[0]) if arms and all(a in left_out for a in arms) else None
                finding.experiment = Experiment.not_measured(why or f"{ended} before this fix was measured")
        stacked = self.recommended.fixes if self.recommended else []
        for candidate, _ in self.after:  # a rule's fix that waited on the loading fix (a screen's is left out unmeasured)
            finding = candidate.finding(self.findings)
            if finding.experiment is None and not finding.screen:
                finding.experiment = Experiment.not_measured(
                    f"{judge.AFTER_REASON}; " + ("the recommended stack on the loading fix measured it" if candidate.label in stacked
                                                 else "no stack on a loading fix was recommended"))

    def candidates(self) -> list[Candidate]:
        """The fixes the arms measure, one per finding."""
        return list({a.candidate.finding_index: a.candidate for a in self.arms.values()
                     if a.candidate.finding_index is not None}.values())

    def fixes(self, results: list[RoundResult], arms: list[str], *, out_of_time: bool, final: bool = True,
              confirming: bool = False) -> list[str]:
        """Judge `arms` and settle each fix on its best value (:func:`judge.sweep_winner`).
        `final=False`: a fix whose best value the first pass did not settle (:func:`judge.settled`)
        is left for a second; its arms are returned, and a tie's. `confirming`: a later pass, after
        which only an undecided fix that leans faster goes again (:func:`judge.worth_another`; a
        tie a second pass kept is an answer, the cheapest value). `out_of_time`: the time budget ended the rounds."""
        fitting: list[tuple[Candidate, Experiment, int]] = []  # memory fixes that bring an over-budget run within it
        by_candidate: dict[int | None, list[tuple[str, Candidate, Experiment]]] = {}
        untried: dict[int | None, list[tuple[Candidate, str]]] = {}  # a sweep's values the run ended before, and why
        left_out = self.spend.left_out
        self.beaten = [a for a in self.beaten if a not in arms]  # judged again here, and placed anew
        for arm in arms:
            candidate, point = self.arms[arm].candidate, self.arms[arm].point
            exp = self.reading.outcome(results, arm)
            if isinstance(exp, Unmeasured):
                if not exp.switchable:
                    self.to_fresh(candidate, exp.why)
                else:
                    why = exp.why if arm in left_out or not out_of_time else "the time budget ended before it was measured"
                    untried.setdefault(candidate.finding_index, []).append((point, why))
                continue
            by_candidate.setdefault(candidate.finding_index, []).append((arm, point, exp))
        again: list[str] = []
        judged = []  # each fix: its arms, its finding, its memory budget, its best value and a tie's note
        for tried in by_candidate.values():
            candidate = self.arms[tried[0][0]].candidate
            if candidate in self.fresh:
                continue  # one of its values could not be switched: the fresh runs measure it whole
            finding = candidate.finding(self.findings)
            budget = judge.usable_budget(finding.evidence)
            judged.append((tried, candidate, finding, budget, *self.reading.sweep_winner(results, tried, budget)))
        # A fix that leans faster after its second pass joins the stack with a verified one (judge.stack_members):
        # the stack's windows decide it, so a third pass alone would spend the budget the stack needs.
        stacks_with = bool(self.winners) or any(best.verified for *_, best, _ in judged)
        for tried, candidate, finding, budget, best, tied in judged:
            values = [(point, exp) for _, point, exp in tried]
            undecided = (judge.worth_another(best) and not stacks_with) if confirming else \
                not judge.settled(best) or tied
            if not final and undecided:
                for arm, _, exp in tried:
                    (self.beaten if judge.beaten(exp, best) else again).append(arm)
                continue
            rows = judge.sweep_rows(values, untried.get(candidate.finding_index, []), budget)
            best.sweep = rows if len(rows) > 1 else None
            if tied:
                self.notes.append(tied)
            judge.settle(finding, candidate, best, budget, self.winners, fitting)
            if judge.worth_another(best):  # its passes ran out leaning faster: the stack may show it
                self.leaners.append((candidate, best))
        for index, points in untried.items():  # every value of a fix left out: not measured, and why
            left = self.findings[index] if index is not None else None
            if left is not None and index not in by_candidate and left.experiment is None and \
                    all(self._arm_of(p) in left_out for p, _ in points):
                left.experiment = Experiment.not_measured(points[0][1])
        if fitting or self.fit_budget is None:
            self.winners, self.fit_budget = judge.with_fastest_fit(self.winners, fitting)
        return again

    def _arm_of(self, point: Candidate) -> str | None:
        return next((a for a, arm in self.arms.items() if arm.point is point), None)

    def stack(self, rounds: list[RoundResult], arm: str, *, final: bool) -> None:
        """The stack's passes so far (`rounds`, its arm `arm`): recommended once one pass settles
        it, or after the second."""
        exp = self.reading.outcome(rounds, arm)
        if isinstance(exp, Experiment) and not final and len(rounds) < 2 and not judge.settled(exp):
            return  # a second pass follows
        self.recommend("could not be measured in-process" if isinstance(exp, Unmeasured) else exp)

    def to_fresh(self, candidate: Candidate, why: str) -> None:
        """Leave `candidate` to fresh runs of the script, saying why once (the child's reason)."""
        if candidate not in self.fresh:
            self.fresh.append(candidate)
            self.notes.append(f"{candidate.label} is measured in fresh runs of the script, not inside this run: {why}")
