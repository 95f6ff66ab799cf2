"""The in-process arms' rounds as a state machine: each round's windows planned, what the child
measured in them judged, and the next round planned from the verdicts. No files, no clock, no
process: windows out, recorded rounds in (:class:`RoundResult`, from the child's lines), so every
decision is testable on recorded lines. :class:`advisor.experiments.inprocess.ArmsSession` runs it
against a live child.

The transitions (:meth:`Rounds.advance`)::

    FIXES ──(a fix its first pass left undecided or tied, a screen that looked faster)──> CONFIRM
    CONFIRM ──(still undecided, fewer than PASSES passes)──> CONFIRM
    FIXES, CONFIRM ──(two winners, or a winner and a fix leaning faster)──> STACK ──(one pass did not settle it)──> STACK
    any ──(nothing left to measure)──> END
    any ──(the next round's windows do not fit the time left)──> END

A time budget is a normal end: a round is planned only as far as its windows fit the time left
(each window's steps at its arm's measured step time, ending on a baseline window), and what
was planned but not run is counted and said (:meth:`Rounds.budget_note`).

FIXES is one pass over the rules' fixes (every sweep value: switching is cheap), the larger batches
smallest first, and one short window for each untried fix (a screen), the arms with the most
expected gain per predicted second first and those predicted not to fit the budget not started
(:mod:`.worth`); CONFIRM the reverse pass ((B) P3 B P2 P1 B, so a drift weighs on both sides alike)
for the fixes the first left undecided (:func:`judge.settled`, or a sweep whose leader a rival
ties head to head), the screens that looked faster in full, then the undecided larger batches;
STACK the winners together, with the fixes that leaned faster unverified (the stack's windows decide them). Each round is judged by :mod:`.verdicts`, every verdict from
:mod:`advisor.experiments.judge`.

A round after the first opens on its arms where the round before closed on a quiet baseline
window: that window is the baseline before them (:attr:`RoundResult.opened_by`), measured once and
counted once; a window each round, a sixth of word_language_model's arms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING


from .. import overrides as vocabulary
from ..overrides.cores import cores_per_rank
from ..analysis import steptime
from ..model import Experiment, Finding, Recommendation, Verdict
from ..run_dir.protocol import Window
from . import judge
from .arms import Arm, Outcome, Role, RoundResult, ran
from .plan import BASELINE, Candidate, candidates_from, expected_speedup, interleave, plan_windows, sweep_points
from .sizing import MIN_WINDOW_STEPS, WindowSizing
from .reading import Reading
from .spend import Spend
from .verdicts import Verdicts
from .worth import Worth

if TYPE_CHECKING:
    from advisor.profile import Profile

LARGE_EFFECT = 3     # every rule's fix expected at least this much faster: windows of half the steps
                    # (a 3x effect is resolved by 5 slow steps; the fast arm windows scale with it)
STACKED = "stacked"
# A fix's passes (round 0 and the CONFIRM rounds), a pass a neighbour disturbed measured again: one
# still undecided is settled on them.
PASSES = 3
# Passes a run gives again for a neighbour (:func:`advisor.experiments.inprocess.disturbed`): a fix every
# window of which it disturbed so far, added to a pass it was not due, and a pass past PASSES for one
# that had windows set aside. Past it, what is left is said, not chased.
REPLACE_CAP = 4


class RoundKind(str, Enum):
    FIXES = "fixes"
    CONFIRM = "confirm"
    STACK = "stack"
    END = "end"


@dataclass
class Rounds:
    """The rounds of one run's arms. :meth:`start` plans round 0 from the window's findings;
    :meth:`advance` judges the round the child just measured and plans the next ([]: the arms end);
    :meth:`end` judges a round the run ended inside. The findings are filled in place."""

    run_dir: Path
    safe_only: bool = False
    max_experiments: int = 12
    window_steps: int = 10
    io_like: bool = False  # the window's steps wait on loading, not on compute
    findings: list[Finding] = field(default_factory=list)
    fresh: list[Candidate] = field(default_factory=list)  # fixes left to fresh-run experiments
    notes: list[str] = field(default_factory=list)
    round: int = -1
    results: dict[int, RoundResult] = field(default_factory=dict)  # round -> what the child measured in it
    by_samples: bool = False
    arms: dict[str, Arm] = field(default_factory=dict)  # arm id -> what it measures
    _kinds: dict[int, RoundKind] = field(default_factory=dict)  # round -> what it measures
    _sizing: WindowSizing | None = None
    _planned: dict[int, int] = field(default_factory=dict)  # round -> its windows
    _round_arms: dict[int, set[str]] = field(default_factory=dict)  # round -> the arms planned in it
    _cut_arms: set[str] = field(default_factory=set)  # arms of a round the time budget ended or left unplanned
    out_of_time: bool = False  # the time budget ended the rounds
    replaced: int = 0  # passes given to fixes a neighbour disturbed every window of (their own ones included)
    replace_cap_reached: bool = False
    _spend: Spend | None = None
    _reading: Reading | None = None
    _verdicts: Verdicts | None = None

    @property
    def sizing(self) -> WindowSizing:
        """The windows' sizes, fixed by :meth:`start`."""
        if self._sizing is None:
            raise RuntimeError("the rounds have not started")
        return self._sizing

    @property
    def spend(self) -> Spend:
        """Where the arms' time goes (:mod:`.spend`), from :meth:`start` on."""
        if self._spend is None:
            raise RuntimeError("the rounds have not started")
        return self._spend

    @property
    def verdicts(self) -> Verdicts:
        """What the rounds' windows decided so far (:mod:`.verdicts`), from :meth:`start` on."""
        if self._verdicts is None:
            raise RuntimeError("the rounds have not started")
        return self._verdicts

    @property
    def recommended(self) -> Recommendation | None:
        """The recommendation, once the winners are settled."""
        return self._verdicts.recommended if self._verdicts is not None else None

    def outcome(self, results: list[RoundResult], arm: str) -> Outcome:
        """`arm`'s result over its windows in `results`, or why there is none (:mod:`.reading`)."""
        if self._reading is None:
            raise RuntimeError("the rounds have not started")
        return self._reading.outcome(results, arm)

    @property
    def left_out(self) -> dict[str, Worth]:
        return self._spend.left_out if self._spend is not None else {}

    # the machine ------------------------------------------------------------------------------------
    def start(self, findings: list[Finding], profile: Profile, time_left_s: float | None = None,
              arms_from: float | None = None) -> list[Window]:
        """Round 0 (FIXES) for the findings of the profiled window (`profile`: its Profile), as far
        as it fits `time_left_s`; the arms' time starts at `arms_from` on the child's clock (default:
        the window's last step's end)."""
        self.findings = findings
        self.by_samples = judge.by_samples(profile.steps)
        self._sizing = WindowSizing.of(self.window_steps, profile)
        self._reading = Reading(self.run_dir, self.arms, self.results, self.by_samples, self.sizing.workers == 0,
                                lambda arm: self.spend.left_out_why(arm), steptime.timed_steps(profile.steps)[0])
        self._spend = Spend(self.arms, self.findings, self.results, self._steps, self.sizing.warmup,
                            steptime.pace(profile.steps), str(profile.env.device or "cpu"),
                            arms_from=steptime.span_end(profile.steps) if arms_from is None else arms_from)
        self._verdicts = Verdicts(self.arms, self.findings, self.fresh, self.notes, self._reading, self._spend)
        windows = self._fixes_round(profile, time_left_s)
        fitted = self.spend.fit(windows, time_left_s)
        if windows and not fitted:
            self.out_of_time = True
        return self._enter(RoundKind.FIXES, fitted)

    def advance(self, result: RoundResult, time_left_s: float | None = None) -> list[Window]:
        """The current round measured `result`: judge it, then the next round's windows, as far as
        they fit `time_left_s` (None: no limit). A round none of whose windows fit is not run: the
        rounds end there, each fix judged on what was measured."""
        self._record(result)
        self._judge_round(final=False)
        self._replace_disturbed()
        kind, windows = self._next()
        # the round just measured closed on a quiet baseline: the next opens on its arms, that window
        # the baseline before them (a window each round, a sixth of wlm's arms)
        opened = bool(windows) and windows[0].arm == BASELINE and result.closing() is not None
        fitted = self.spend.fit(windows[1:] if opened else windows, time_left_s)
        if windows and not fitted:
            self._out_of_time(kind, windows)
        return self._enter(kind, fitted)

    def _record(self, result: RoundResult) -> None:
        """The current round's result; one that opens on an arm (only a round after the first, see
        :meth:`advance`) is opened by the round before's closing baseline."""
        if result.windows and result.windows[0].arm != BASELINE and self.round - 1 in self.results:
            result.opened_by = self.results[self.round - 1]
        self.results[self.round] = result

    def end(self, result: RoundResult | None, out_of_time: bool = False) -> None:
        """The run ended inside the current round (`result`: what it measured of it; `out_of_time`:
        the time budget ended it): judge it on that, and say of every fix still unjudged why."""
        self.out_of_time = self.out_of_time or out_of_time
        if (verdicts := self._verdicts) is None:  # the rounds never started
            return
        if out_of_time and self.running:  # the budget ended this round: its arms wanted it
            self._cut_arms |= self._round_arms.get(self.round, set())
        ended = "the time budget ended" if self.out_of_time else "the run ended"
        if self.running and self.round not in self.results:
            if result is None:  # nothing of it came back: as a round that did not fit
                self._settle_unmeasured(self.kind, ended)
            else:
                self.spend.cut += max(0, self._planned.get(self.round, 0) - len(result.windows))
                self._record(result)
                self._judge_round(final=True)
        if verdicts.recommended is None and verdicts.winners and self.kind in (RoundKind.FIXES, RoundKind.CONFIRM):
            verdicts.recommend_unstacked(ended)
        verdicts.unjudged(ended)

    def undecided(self) -> list[tuple[Finding, Worth]]:
        """The fixes the time budget cut while they wanted another pass and leaned faster
        (:func:`judge.worth_another`): an arm of theirs was planned in the round the budget ended
        inside or left unplanned (a screen measured in one short window, a rule's fix on one pass,
        a leaner whose stack never ran), each with its arms' predicted cost of one pass; none that
        is in the verified recommendation. adder's default run read batch x2 at 1.36x in one window
        and said nothing of it."""
        rec = self.recommended
        cut = set(self._cut_arms)
        if STACKED in cut:  # the stack was to decide its leaners
            cut |= {a for a, arm in self.arms.items() if any(arm.candidate is c for c, _ in self.verdicts.leaners)}
        out = []
        for candidate in self.verdicts.candidates() if self._verdicts is not None else []:
            finding = candidate.finding(self.findings)
            exp = finding.experiment
            arms = [a for a, arm in self.arms.items() if arm.candidate is candidate and a not in self.left_out]
            if exp is None or exp.speedup is None or exp.measured_by != "in-process" or not cut & set(arms) \
                    or not judge.worth_another(exp) or (rec is not None and rec.verified and candidate.label in rec.fixes):
                continue
            worths = [self.spend.worth_of(a) for a in arms]
            out.append((finding, Worth(exp.speedup - 1.0, sum(w.seconds for w in worths), sum(w.compile_s for w in worths))))
        return out

    def budget_note(self, budget_s: float) -> str | None:
        """What the time budget left out, in one line (None: it left nothing out)."""
        if not self.out_of_time:
            return None
        run = sum(len(r.windows) for r in self.results.values())
        left = [f.fix.title for f in (c.finding(self.findings) for c in self.verdicts.candidates())
                if f.experiment is not None and f.experiment.verdict is Verdict.NOT_MEASURED]
        return (f"the time budget ({budget_s:.0f} s) ended the experiments after {run} of {run + self.spend.cut} windows"
                + (f"; not measured: {'; '.join(left)}" if left else "") + " (a longer --time-budget measures more)")

    @property
    def kind(self) -> RoundKind | None:
        """The current round's kind (None before :meth:`start`)."""
        return self._kinds.get(self.round)

    @property
    def running(self) -> bool:
        """A round with windows is planned or being measured."""
        return self.kind not in (None, RoundKind.END)

    def label(self, arm: str) -> str:
        return self.arms[arm].point.label if arm in self.arms else arm

    def _enter(self, kind: RoundKind, windows: list[Window]) -> list[Window]:
        windows = self.spend.timed(windows, self.sizing.floor, self.round + 1,
                                   align=self.sizing.epoch is not None) if windows else windows
        self.round += 1
        self._kinds[self.round] = kind if windows else RoundKind.END
        self._planned[self.round] = len(windows)
        self._round_arms[self.round] = {w.arm for w in windows} - {BASELINE}
        return windows

    def _out_of_time(self, kind: RoundKind, windows: list[Window]) -> None:
        """The next round (its `windows`) does not fit: settle what the rounds so far measured, as a
        run that ended."""
        self.out_of_time = True
        self._cut_arms |= {w.arm for w in windows} - {BASELINE}
        self._settle_unmeasured(kind, "the time budget ended")

    def _settle_unmeasured(self, kind: RoundKind | None, ended: str) -> None:
        """A round of `kind` that will not be measured (it did not fit, or the run ended in it with
        nothing of it back, `ended` saying how): settle what the rounds before it measured."""
        if kind is RoundKind.CONFIRM:  # the fixes left undecided: settled on the passes measured
            self._judge_confirms(final=True)
        elif kind is RoundKind.STACK and self._measured(RoundKind.STACK):
            self._judge_stack(final=True)
        if self.verdicts.recommended is None:
            self.verdicts.recommend_unstacked(ended)

    def _replace_disturbed(self) -> None:
        """A fix every window of which a neighbour disturbed so far goes again (a CONFIRM pass),
        added to a pass it was not due only while fewer than REPLACE_CAP such passes ran: a starved
        loader's 9x win went unsaid beside a package install when one busy machine withheld every
        verdict; a screen's too (tiny-gpt's fused AdamW, its one window disturbed, was never judged)."""
        if self.kind not in (RoundKind.FIXES, RoundKind.CONFIRM):
            return
        verdicts = self.verdicts
        for arm in self.silenced():
            if arm not in verdicts.again:  # its passes are not over: it goes again anyway
                if self.replaced >= REPLACE_CAP:
                    self.replace_cap_reached = True
                    continue
                verdicts.again.append(arm)
            self.replaced += 1

    def silenced(self) -> list[str]:
        """The fixes' arms (a stack's aside) that ran windows none of which can be compared with a
        baseline: a neighbour disturbed every one of them, or the baseline windows beside them."""
        out = []
        for a, arm in self.arms.items():
            if arm.role is not Role.STACK and ran(self.results.values(), a) and not any(r.paired(a) for r in self.results.values()):
                out.append(a)
        return out

    def set_aside(self) -> int:
        """Windows a neighbour disturbed, set aside (left out of every figure)."""
        return sum(len(r.busy) for r in self.results.values())

    def _next(self) -> tuple[RoundKind, list[Window]]:
        """The transition out of the round just judged."""
        if self.kind is RoundKind.FIXES and (windows := self._confirm_round()):
            return RoundKind.CONFIRM, windows
        if self.kind is RoundKind.CONFIRM and (self.verdicts.again or self.verdicts.promoted) and \
                (windows := self._confirm_round()):  # still undecided: another pass, as far as the time allows
            return RoundKind.CONFIRM, windows
        if self.kind in (RoundKind.FIXES, RoundKind.CONFIRM):
            return RoundKind.STACK, self._stack_round()
        if self.kind is RoundKind.STACK and self.recommended is None:  # its first pass did not settle it
            return RoundKind.STACK, self._windows([(STACKED, self.arms[STACKED].point.overrides)])
        return RoundKind.END, []

    # planning --------------------------------------------------------------------------------------
    def _fixes_round(self, profile: Profile, time_left_s: float | None) -> list[Window]:
        loaders = profile.observed.dataloaders
        ctx = vocabulary.SweepContext(cores_per_rank(profile.env), self.io_like, threads=profile.env.torch_threads,
                                      script_workers=profile.observed.max_workers if loaders else None)
        for candidate in candidates_from(self.findings, self.safe_only):
            finding = candidate.finding(self.findings)
            refusals = [vocabulary.live_loader_refusal(candidate.overrides, dl) for dl in loaders]
            refused = refusals[0] if refusals and all(refusals) else None
            if refused:  # every loader the script built refuses it (an arm would only say so)
                self.verdicts.to_fresh(candidate, refused)
                continue
            if why := vocabulary.fresh_only(candidate.overrides):  # no live process can switch it
                self.verdicts.to_fresh(candidate, why)
                continue
            if vocabulary.changes_batch(candidate.overrides) and not self.by_samples:
                finding.experiment = Experiment.not_measured("the batch size is unknown, so samples/s cannot be compared")
                continue
            points = [candidate] if finding.screen else sweep_points(candidate, ctx)  # a screen is one value
            for point in points[: self.max_experiments]:
                arm = f"a{len(self.arms) + 1}"
                role = (Role.SCREEN if finding.screen else
                        Role.LADDER if vocabulary.batch_scale(point.overrides) > 1 else Role.FIX)
                self.arms[arm] = Arm(candidate, point, role)
                self.sizing.lengths[arm] = expected_speedup(finding)
        self.verdicts.after = [(c, c.finding(self.findings).after or "")
                               for c in candidates_from(self.findings, self.safe_only, after=True)]
        expected = [self.sizing.lengths[a] for a, _ in self._of(Role.FIX) + self._of(Role.LADDER)]
        if expected and min(expected) >= LARGE_EFFECT:  # the slow baseline windows need half the steps
            self.sizing.base_steps = max(MIN_WINDOW_STEPS, self.sizing.timed // 2)
        chosen = self.spend.choose(time_left_s)
        self.out_of_time = self.out_of_time or bool(self.left_out)
        fixes, ladder, screens = ([(a, self.arms[a].point.overrides) for a in chosen if self.arms[a].role is role]
                                  for role in (Role.FIX, Role.LADDER, Role.SCREEN))
        return plan_windows(fixes, ladder, self.sizing.warmup, self._steps, screens, passes=1)

    def _confirm_round(self) -> list[Window]:
        """The reverse pass of the undecided fixes, the promoted screens in two passes, then the
        larger batches, smallest first, each twice: an out-of-memory error ends the child's arms,
        so it may only cost the values larger than the one that ran out."""
        verdicts = self.verdicts
        again = [(a, self.arms[a].point.overrides) for a in reversed(verdicts.again) if self.arms[a].role is not Role.LADDER]
        larger = [(a, self.arms[a].point.overrides) for a in verdicts.again if self.arms[a].role is Role.LADDER]
        promoted = [(a, self.arms[a].point.overrides) for a in verdicts.promoted]
        windows: list[Window] = []
        for part in (plan_windows(again, [], self.sizing.warmup, self._steps, passes=1),
                     interleave(promoted, self.sizing.warmup, self._steps) if promoted else [],
                     plan_windows([], larger, self.sizing.warmup, self._steps, passes=1)):
            windows += part[1:] if windows and part else part  # one baseline window between two parts
        return windows

    def _stack_round(self) -> list[Window]:
        members = self.verdicts.stack_members()
        if len(members) < 2:
            self.verdicts.recommend(None)
            return []
        stacked = judge.stacked_candidate(members)
        self.arms[STACKED] = Arm(stacked, stacked, Role.STACK)
        self.sizing.lengths[STACKED] = max(1, min(8, round(max((e.speedup or 1.0) for _, e in members))))
        return self._windows([(STACKED, stacked.overrides)])

    def _windows(self, arms: list[tuple[str, dict]]) -> list[Window]:
        return interleave(arms, self.sizing.warmup, self._steps, passes=1)

    def _steps(self, arm: str) -> int:
        overrides = self.arms[arm].point.overrides if arm in self.arms else {}
        return self.sizing.steps(arm, overrides, baseline=arm == BASELINE)

    def _of(self, role: Role) -> list[tuple[str, dict]]:
        return [(a, arm.point.overrides) for a, arm in self.arms.items() if arm.role is role]

    # judging ---------------------------------------------------------------------------------------
    def _judge_round(self, *, final: bool) -> None:
        """Judge what the current round measured. `final`: the run ended in it, so a fix its first
        pass left undecided is settled on that pass alone."""
        this, verdicts, out_of_time = self.results[self.round], self.verdicts, self.out_of_time
        if self.kind is RoundKind.FIXES:
            verdicts.again = verdicts.fixes([this], [a for a, _ in self._of(Role.FIX) + self._of(Role.LADDER)],
                                            out_of_time=out_of_time, final=final)
            verdicts.screens(this)
        elif self.kind is RoundKind.CONFIRM:  # round 0 measured their first pass
            passes = 1 + len(self._measured(RoundKind.CONFIRM))
            replacing = passes >= PASSES and passes < PASSES + self._disturbed_passes() and not final
            if replacing and self.replaced >= REPLACE_CAP:
                self.replace_cap_reached, replacing = True, False
            self._judge_confirms(final=final or (passes >= PASSES and not replacing))
            if replacing and (verdicts.again or verdicts.promoted):
                self.replaced += 1  # a pass past PASSES: the one a neighbour took, measured again
        elif self.kind is RoundKind.STACK:
            self._judge_stack(final=final)

    def _disturbed_passes(self) -> int:
        """The passes so far (round 0 and the CONFIRM rounds) with windows a neighbour disturbed set
        aside: each is measured again (REPLACE_CAP in all). Beside a CPU burner tiny-gpt's fused AdamW
        ended its three passes at 1.17-1.29x, the intervals' low ends 0.91-1.01x, with 3-4.5 s of the
        budget left."""
        return sum(1 for r in [*self._measured(RoundKind.FIXES), *self._measured(RoundKind.CONFIRM)] if r.busy)

    def _measured(self, kind: RoundKind) -> list[RoundResult]:
        """The rounds of `kind` measured so far, in order."""
        return [self.results[r] for r, k in sorted(self._kinds.items()) if k is kind and r in self.results]

    def _judge_confirms(self, *, final: bool) -> None:
        """The undecided fixes over round 0 and every CONFIRM round, the promoted screens over the
        CONFIRM rounds (their round-0 window was a short screen). Not `final`: what is still
        undecided stays for another CONFIRM pass (a wide interval is a question of windows)."""
        verdicts, confirms, first = self.verdicts, self._measured(RoundKind.CONFIRM), self._measured(RoundKind.FIXES)
        if not confirms:  # the budget ended before the first: settled on round 0 alone
            verdicts.fixes(first, verdicts.again + verdicts.beaten, out_of_time=True)
            return
        again = verdicts.fixes([*first, *confirms], verdicts.again + verdicts.beaten,
                               out_of_time=self.out_of_time, final=final,
                               confirming=True)
        # a promoted screen the passes so far never reached stays promoted: a later pass measures it,
        # or the run's end reports its screen, not "not measured"
        reached = [a for a in verdicts.promoted if ran(confirms, a)]
        verdicts.promoted = verdicts.fixes(confirms, reached, out_of_time=self.out_of_time, final=final,
                                           confirming=True) + [a for a in verdicts.promoted if a not in reached]
        verdicts.again = again

    def _judge_stack(self, *, final: bool) -> None:
        self.verdicts.stack(self._measured(RoundKind.STACK), STACKED, final=final)

    def claims(self) -> list:
        """Every in-process result the report will show: the findings' experiments and the recommendation."""
        return [f.experiment for f in self.findings if f.experiment is not None] + \
            ([self.recommended] if self.recommended is not None else [])
