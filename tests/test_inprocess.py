"""In-process experiments: arms of the profiled run, planned, interleaved and judged.

The plan/judge logic is tested on synthetic rounds (exact numbers); the whole flow on real runs
of real scripts through the real CLI.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from advisor.run_dir.seen import Env, Observed
from advisor.experiments.inprocess import ArmsSession
from advisor.experiments.arms import RoundResult
from advisor.experiments.rounds import RoundKind, Rounds
from advisor.experiments.plan import BASELINE, interleave, plan_windows
from advisor.experiments import judge
from advisor.model import AFTER, SCREEN, Experiment, Finding, Fix, Verdict
from advisor.run_dir.protocol import ArmLine, ArmStepLine, RankLines, read_plan, write_line
from conftest import WORKLOADS, advise_cmd


def test_arms_are_interleaved_two_to_a_baseline_and_repeated_in_reverse():
    """Each arm window has a baseline beside it and the next one a window away: on one side in the
    first pass, on the other in the reversed second pass."""
    windows = interleave([("a1", {"x": 1}), ("a2", {"x": 2}), ("a3", {"x": 3})], lambda o: 3 if o else 1, 10)
    assert [w.arm for w in windows] == ["baseline", "a1", "a2", "baseline", "a3", "baseline",
                                        "a3", "a2", "baseline", "a1", "baseline"]
    assert all(w.steps == 10 for w in windows) and {w.warmup for w in windows if w.arm == BASELINE} == {1}


def test_larger_batches_run_last_smallest_first_so_an_oom_costs_only_larger_values():
    """An out-of-memory error ends the child's arms: the batch ladder comes after every other arm,
    smallest first, each value twice in a row, so an OOM at x4 leaves x2 and the other fixes measured."""
    windows = plan_windows([("a1", {"x": 1})], [("b4", {"batch_size_scale": 4}), ("b2", {"batch_size_scale": 2})],
                           lambda o: 2, 10)
    assert [w.arm for w in windows] == ["baseline", "a1", "baseline", "a1", "baseline",
                                        "b2", "baseline", "b2", "baseline", "b4", "baseline", "b4", "baseline"]
    alone = plan_windows([], [("b2", {"batch_size_scale": 2})], lambda o: 2, 10)
    assert [w.arm for w in alone] == ["baseline", "b2", "baseline", "b2", "baseline"]
    assert plan_windows([], [], lambda o: 2, 10) == []


def test_a_round_of_screens_opens_on_a_baseline_as_short_as_those_that_close_them():
    """Screens run in half windows, two between baselines of the same length: the baseline that opens
    them is no longer (minGPT's adder spent 0.3 s of its 5.6 s budget on a full-length one, and its
    best fix, batch x2, went unconfirmed for want of 0.2 s)."""
    windows = plan_windows([], [], lambda o: 2, 40, screens=[("s1", {"x": 1}), ("s2", {"y": 1}), ("s3", {"z": 1})])
    assert [(w.arm, w.steps) for w in windows] == [("baseline", 20), ("s1", 20), ("s2", 20), ("baseline", 20),
                                                   ("s3", 20), ("baseline", 20)]
    growing = plan_windows([], [("b2", {"batch_size_scale": 2})], lambda o: 2, 40, screens=[("s1", {"x": 1})])
    assert [(w.arm, w.steps) for w in growing][:2] == [("baseline", 40), ("b2", 40)]


class Child:
    """A recorded child: runs each plan's windows as the probe's child would write them (an
    ArmStepLine per timed step, an ArmLine per window, in steps.jsonl and arms.jsonl across rounds),
    each arm's steps taking `speed(window)` seconds (2% noise), all but 30 ms of it waiting on the
    loader, and reads them back as the runner does."""

    def __init__(self, tmp_path) -> None:
        self.lines = RankLines(tmp_path / "steps.jsonl", tmp_path / "arms.jsonl")
        self.t, self.rng = 100.0, np.random.default_rng(0)

    def run(self, round_no: int, windows: list, speed, not_switchable: dict | None = None, stop_after: int | None = None,
            no_effect: dict | None = None, batch=lambda w: 32, stretch=lambda w, i: 1.0):
        with open(self.lines.steps_path, "a") as steps, open(self.lines.arms_path, "a") as arms:
            for k, w in enumerate(windows[:stop_after]):
                refused = (not_switchable or {}).get(w.arm, {})
                for i in range(10):
                    d = speed(w) * stretch(w, i) * (1 + self.rng.normal(0, 0.02))
                    write_line(steps, ArmStepLine(round=round_no, window=k, arm=w.arm, index=i, t_start=self.t,
                                                  t_end=self.t + d, duration_s=d, host_s=d, cpu_s=d, clock="host",
                                                  data_wait_s=max(0.0, d - 0.03), samples=batch(w), loss=1.0,
                                                  loss_finite=True))
                    self.t += d
                workers = (w.overrides.get("dataloader") or {}).get("num_workers", 0)
                write_line(arms, ArmLine(round=round_no, window=k, arm=w.arm, overrides=w.overrides, switch_s=0.1,
                                         applied={"dataloaders": [{"num_workers": workers}],
                                                  **{x: v for x, v in w.overrides.items() if x != "dataloader"
                                                     and x not in (no_effect or {}).get(w.arm, ())},
                                                  "optimizers": [w.overrides.get("optimizer") or {}]},
                                         not_switchable=list(refused), reasons=refused))
        self.lines.read()
        return RoundResult.read(self.lines, round_no)


def _profile(cores: int = 2, io_like: bool = False):
    steps = pd.DataFrame({"duration_s": [0.1] * 10, "samples": 32, "profiled": False})
    return type("P", (), {"steps": steps, "env": Env(cpu_count=cores), "observed": Observed(), "samples": pd.DataFrame()})()


def _dl001(workers: int = 2) -> Finding:
    return Finding("starved", "s", "high", {}, Fix.safe("workers", {"dataloader": {"num_workers": workers}}),
                   rule="dataloader-starvation", code="DL001")


def _workers(w) -> int:
    return (w.overrides.get("dataloader") or {}).get("num_workers", 0)


def test_the_best_sweep_value_is_chosen_by_its_interval_not_by_the_first_that_helps(tmp_path):
    """A starved loader on 8 cores: 2, 4 and 8 workers, one arm each, in one pass; 4 workers (2.5x)
    beat 2 (2.0x) and 8 (2.2x). The fix adopts 4; the sweep lists every value."""
    finding, child = _dl001(), Child(tmp_path)
    rounds = Rounds(tmp_path)
    first = rounds.start([finding], _profile(cores=8))
    assert sorted({_workers(w) for w in first} - {0}) == [2, 4, 8] and rounds.kind is RoundKind.FIXES
    speed = {0: 0.10, 2: 0.05, 4: 0.04, 8: 0.045}
    assert rounds.advance(child.run(0, first, lambda w: speed[_workers(w)])) == []  # settled, one winner: no stack
    exp = finding.experiment
    four = {"dataloader": {"num_workers": 4}}
    assert exp.verified and exp.measured_by == "in-process" and exp.overrides == four
    assert exp.speedup == pytest.approx(2.5, rel=0.05) and len(exp.runs) == 1 and len(exp.sweep) == 3
    assert finding.fix.overrides == four and finding.fix.proposed_overrides == {"dataloader": {"num_workers": 2}}
    assert finding.fix.title == "Load batches in 4 worker processes"  # the measured value, not the rule's 2 beside it
    assert rounds.recommended.verified and rounds.recommended.overrides == four and not rounds.fresh
    assert rounds.kind is RoundKind.END


def _disturb(result: RoundResult, arms: set[str], wait: float = 0.4) -> RoundResult:
    """Mark `arms`' windows of `result` as a neighbour's (1.2 cores used, the script waiting `wait`
    cores more), the rest quiet, and set aside what :func:`disturbed` says over this one round."""
    from advisor.experiments.inprocess import disturbed

    for line in result.windows:
        hit = line.arm in arms
        result.outside[line.window], result.waits[line.window] = (1.2, 0.02 + wait) if hit else (0.1, 0.02)
    disturbed([result], cpu_count=2)
    return result


def _one_fix(tmp_path, slower: float = 1.0):
    """A starved loader's fix on 2 cores, its first round planned: (finding, child, rounds, first
    windows, the fix's arm, a speed at which the fix is 2.5x, every window `slower` times longer)."""
    finding, child = _dl001(), Child(tmp_path)
    rounds = Rounds(tmp_path)
    first = rounds.start([finding], _profile(cores=2))
    arm = next(w.arm for w in first if w.arm != BASELINE)
    return finding, child, rounds, first, arm, lambda w: slower * (0.10 if w.arm == BASELINE else 0.04)


def test_a_window_a_neighbour_disturbed_is_set_aside_and_measured_again(tmp_path):
    """The fix's one window of round 0 ran beside a neighbour that made the script wait for a core:
    set aside (no figure rests on it), the fix goes again, and its quiet window verifies it."""
    finding, child, rounds, first, arm, speed = _one_fix(tmp_path)
    result = _disturb(child.run(0, first, speed), {arm})
    assert set(result.busy) == {k for k, w in enumerate(first) if w.arm == arm}
    again = rounds.advance(result)
    assert arm in {w.arm for w in again} and rounds.replaced >= 1 and rounds.silenced() == [arm]
    rounds.advance(_disturb(child.run(1, again, speed), set()))
    assert rounds.silenced() == [] and rounds.set_aside() >= 1
    assert finding.experiment.verified and finding.experiment.speedup == pytest.approx(2.5, rel=0.1)


def test_a_fix_window_and_the_baseline_beside_it_both_disturbed_are_kept_as_a_pair(tmp_path):
    """A neighbour that came and went, through the fix's window and its baselines (a duet: it hit both
    sides, 30% slower each): nothing is set aside or measured again, the pair is compared with each
    other, and the fix is verified at its quiet ratio; a disturbed window with quiet windows beside
    it stays set aside, and so does every window beside a neighbour that never left."""
    from advisor.experiments.inprocess import disturbed

    finding, child, rounds, first, arm, speed = _one_fix(tmp_path, slower=1.3)
    steady = _disturb(child.run(0, first, speed), {arm, BASELINE})  # a neighbour that never left: no pairs
    assert steady.shared == set() and set(steady.busy) == {line.window for line in steady.windows}
    result = child.run(0, first, speed)
    _disturb(result, {arm, BASELINE})
    result.outside[result.windows[-1].window], result.waits[result.windows[-1].window] = 0.1, 0.02  # it left
    disturbed([result], cpu_count=2)
    last = result.windows[-1].window
    assert result.busy == {} and result.shared == {line.window for line in result.windows} - {last}
    rounds.advance(result)
    assert rounds.replaced == 0 and rounds.silenced() == [] and rounds.set_aside() == 0
    assert finding.experiment.verified and finding.experiment.speedup == pytest.approx(2.5, rel=0.1)

    # The report's note counts each disturbed window once: a paired window also read on its quiet steps
    # is among the paired and among those read in part, not a window more.
    from advisor.experiments.inprocess import ArmsSession

    paired = sorted(result.shared)
    result.quiet[paired[0]] = result.steps[paired[0]].iloc[2:]
    note = ArmsSession.set_aside_note(SimpleNamespace(rounds=rounds, clocked=True))
    assert note.startswith(f"{len(paired)} of {len(result.windows)} windows disturbed"), note
    assert "; 1 read on the steps the neighbour left alone (2 steps it waited through left out)" in note, note
    assert f"; {len(paired)} kept in pairs" in note, note

    alone = _disturb(child.run(1, first, speed), {arm})
    assert alone.shared == set() and set(alone.busy) == {line.window for line in alone.windows if line.arm == arm}


def test_a_pair_the_neighbour_slowed_many_times_over_is_set_aside_not_compared(tmp_path):
    """The same neighbour through the fix's window and the baseline beside it, but each step held
    until a time slice came (tiny-gpt beside a burner: a 3 ms step ran 8-470 ms): the disturbed
    baseline ran 10 times its quiet window, so the pair is not kept: both are set aside and the fix
    goes again."""
    from advisor.experiments.inprocess import PAIR_MAX_SLOWDOWN, disturbed

    finding, child, rounds, first, arm, speed = _one_fix(tmp_path)
    last = len(first) - 1
    assert first[last].arm == BASELINE
    slow = {id(w): 10.0 for w in first[:last]}
    result = child.run(0, first, lambda w: slow.get(id(w), 1.0) * speed(w))
    _disturb(result, {arm, BASELINE})
    result.outside[result.windows[-1].window], result.waits[result.windows[-1].window] = 0.1, 0.02  # it left
    disturbed([result], cpu_count=2)
    assert PAIR_MAX_SLOWDOWN < 10 and result.shared == set()
    assert set(result.busy) == {line.window for line in result.windows} - {result.windows[-1].window}
    again = rounds.advance(result)
    assert rounds.silenced() == [arm] and arm in {w.arm for w in again}


@pytest.mark.parametrize("batch", [32, 64], ids=["same-batch", "twice-the-batch"])
def test_a_fix_window_the_neighbour_slowed_many_times_over_is_in_no_pair(tmp_path, batch):
    """The neighbour came and went through the fix's window and the baselines beside it, the baselines
    30% slower, the fix's window 10 times (mingpt-adder's batch x2 beside a burner read 0.21x
    "slower" this way, 1.43x by hand beside it): the fix's window is not compared with them but set
    aside, and the fix goes again. Each side is held to its quiet pace per sample: a fix of twice the
    batch, its steps twice as long and each 30% slower, stays in its pair."""
    from advisor.experiments.inprocess import PAIR_MAX_SLOWDOWN, disturbed

    finding, child, rounds, first, arm, speed = _one_fix(tmp_path)
    assert first[-1].arm == BASELINE
    fix_slowed = 10.0 if batch == 32 else 1.3
    slowed = {id(w): fix_slowed if w.arm == arm else 1.3 for w in first[:-1]}
    scale = lambda w: (batch / 32 if w.arm == arm else 1.0)  # noqa: E731  a step of twice the batch takes twice as long
    result = child.run(0, first, lambda w: slowed.get(id(w), 1.0) * scale(w) * speed(w), batch=lambda w: batch if w.arm == arm else 32)
    _disturb(result, {arm, BASELINE})
    result.outside[result.windows[-1].window], result.waits[result.windows[-1].window] = 0.1, 0.02  # it left
    disturbed([result], cpu_count=2)
    fix_windows = {line.window for line in result.windows if line.arm == arm}
    if batch == 64:
        assert fix_windows <= result.shared and result.busy == {}
        return
    assert PAIR_MAX_SLOWDOWN < fix_slowed and not (fix_windows & result.shared) and fix_windows <= set(result.busy)
    again = rounds.advance(result)
    assert rounds.silenced() == [arm] and arm in {w.arm for w in again}
    assert finding.experiment is None or finding.experiment.verdict is not Verdict.SLOWER


def test_a_window_a_neighbour_disturbed_in_part_is_read_on_its_quiet_steps(tmp_path):
    """A burst through two steps of the first baseline window, each ten times its length (a 2-thread
    step beside a burner on one of two cores), the sampler's clock saying so: the window is read on
    the steps half a tick away from the burst, not set aside, nothing is measured again, and the fix is
    verified at its quiet ratio (the whole window would have read the baseline 2.8 times slower)."""
    from advisor.experiments.inprocess import read_neighbours

    finding, child, rounds, first, arm, speed = _one_fix(tmp_path)
    assert first[0].arm == BASELINE
    burst = {5, 6}
    result = child.run(0, first, speed, stretch=lambda w, i: 10.0 if w is first[0] and i in burst else 1.0)
    frame = result.steps[0]
    lo, hi = float(frame["t_start"].iloc[min(burst)]), float(frame["t_end"].iloc[max(burst)])
    end = max(float(f["t_end"].max()) for f in result.steps.values())
    ticks, t, wait = [], 99.0, 0.0
    while t <= end + 0.2:
        on = lo <= t <= hi
        ticks.append({"t": t, "runq_wait_s": wait, "sys_cpu_percent": 100.0, "cpu_percent": 100.0 if on else 200.0})
        t, wait = t + 0.1, wait + (1.0 if on else 0.02) * 0.1
    read_neighbours(result, [], pd.DataFrame(ticks), cpu_count=2)
    assert 0 in result.quiet and result.busy == {} and not result.shared
    assert len(result.quiet[0]) == 5 and result.quiet[0]["duration_s"].max() < 0.2
    assert result.set_aside_s() == pytest.approx(float(frame["duration_s"].sum() - result.quiet[0]["duration_s"].sum()))
    rounds.advance(result)
    assert rounds.replaced == 0 and rounds.set_aside() == 0
    assert finding.experiment.verified and finding.experiment.speedup == pytest.approx(2.5, rel=0.1)


def test_a_quiet_fix_window_between_disturbed_baselines_is_measured_again_not_failed(tmp_path):
    """The fix's window was quiet, the baselines beside it disturbed alone: it has nothing fair to be
    compared with, so it goes again (not "failed: the baseline could not be re-measured", as a
    starved loader read beside a burner), and the quiet round that follows verifies it."""
    finding, child, rounds, first, arm, speed = _one_fix(tmp_path)
    result = _disturb(child.run(0, first, speed), {BASELINE})
    assert result.shared == set() and not result.paired(arm)
    again = rounds.advance(result)
    assert rounds.silenced() == [arm] and arm in {w.arm for w in again} and rounds.replaced >= 1
    assert finding.experiment is None or finding.experiment.verdict is not Verdict.FAILED
    rounds.advance(_disturb(child.run(1, again, speed), set()))
    assert rounds.silenced() == [] and finding.experiment.verified
    assert finding.experiment.speedup == pytest.approx(2.5, rel=0.1)


@pytest.mark.parametrize("fix_step", [0.04, 0.30], ids=["reads-faster", "reads-slower"])
def test_every_window_disturbed_reaches_the_cap_and_no_figure_is_verified(tmp_path, fix_step):
    """A neighbour beside every window: the fix is measured again REPLACE_CAP times at most, then
    the rounds end; it is judged on disturbed windows only, so not verified, and its verdict is
    neither faster nor slower: not confirmed, with why."""
    from advisor.experiments.rounds import REPLACE_CAP

    finding, child = _dl001(), Child(tmp_path)
    rounds = Rounds(tmp_path)
    windows, round_no = rounds.start([finding], _profile(cores=2)), 0
    speed = lambda w: 0.10 if w.arm == BASELINE else fix_step  # noqa: E731
    while windows and round_no < 3 * REPLACE_CAP:
        everything = {w.arm for w in windows} - {BASELINE}
        windows = rounds.advance(_disturb(child.run(round_no, windows, speed), everything))
        round_no += 1
    rounds.end(None)
    assert REPLACE_CAP <= rounds.replaced <= REPLACE_CAP + 2 and rounds.replace_cap_reached and rounds.silenced()
    assert not finding.experiment.verified and finding.experiment.speedup is not None
    assert finding.experiment.verdict is Verdict.NOT_CONFIRMED and "quiet machine" in finding.experiment.reason


def test_screened_fixes_get_one_short_window_and_only_those_that_look_faster_are_measured_in_full(tmp_path):
    """Experiments decide: fixes no rule proposed (EXP001) are screened in round 0, one short window
    each after the rules' arms; a screen 1.5x faster gets a round of its own, measured in full like
    any fix; one that is slower keeps its one window's result and is not measured again."""
    from advisor.model import SCREEN

    def screen(overrides):
        return Finding("screened", "s", "low", {SCREEN: True}, Fix.unsafe("f", overrides), rule="untried-fix", code="EXP001")

    fast, slow, child = screen({"autocast": "bfloat16"}), screen({"compile": True}), Child(tmp_path)
    rounds = Rounds(tmp_path)
    first = rounds.start([_dl001(), fast, slow], _profile())
    arms = [w.arm for w in first]
    assert arms.count("a1") == 1 and arms.count("a2") == 1 and arms.count("a3") == 1  # one pass, screens once
    assert arms.index("a2") > max(i for i, a in enumerate(arms) if a == "a1")  # screens come after the rules' arms
    short = next(w for w in first if w.arm == "a2")
    assert short.steps < next(w for w in first if w.arm == "a1").steps
    speed = {"baseline": 0.10, "a1": 0.04, "a2": 0.066, "a3": 0.20, "stacked": 0.10}
    second = rounds.advance(child.run(0, first, lambda w: speed[w.arm]))
    assert rounds.kind is RoundKind.CONFIRM
    assert {w.arm for w in second} == {"baseline", "a2"} and sum(w.arm == "a2" for w in second) == 2
    assert slow.experiment is not None and slow.experiment.verdict.value == "slower" and not slow.experiment.verified
    assert fast.experiment is None  # measured in full next
    third = rounds.advance(child.run(1, second, lambda w: speed[w.arm]))  # the stack: DL001's workers + bf16
    assert fast.experiment.verified and fast.experiment.speedup == pytest.approx(1.5, rel=0.05)
    assert {w.arm for w in third} == {"baseline", "stacked"} and rounds.kind is RoundKind.STACK
    fourth = rounds.advance(child.run(2, third, lambda w: speed[w.arm]))  # one window cannot say "no gain": again
    assert {w.arm for w in fourth} == {"baseline", "stacked"} and rounds.kind is RoundKind.STACK
    assert rounds.advance(child.run(3, fourth, lambda w: speed[w.arm])) == []  # the stack gained nothing
    assert rounds.recommended.verified and rounds.recommended.fixes == [rounds.arms["a1"].candidate.label]
    assert any(n.startswith("the stacked configuration (") and ") measured " in n and "not verified" in n for n in rounds.notes)
    rounds.end(None)
    assert fast.experiment.verified and slow.experiment.verdict.value == "slower"


def test_a_screen_read_only_in_windows_a_neighbour_disturbed_is_not_called_slower(tmp_path):
    """A screen's one window ran beside a neighbour that stretched it tenfold (mingpt-adder's batch x2
    read 0.10x "slower" so beside a burner, 1.29x by hand beside it): not confirmed, never slower."""
    from advisor.model import SCREEN

    screen = Finding("screened", "s", "low", {SCREEN: True}, Fix.unsafe("f", {"optimizer": {"fused": True}}),
                     rule="untried-fix", code="EXP001")
    rounds, child = Rounds(tmp_path), Child(tmp_path)
    first = rounds.start([_dl001(), screen], _profile())
    arm = next(w.arm for w in first if w.arm != BASELINE and "optimizer" in w.overrides)
    speed = {BASELINE: 0.10, arm: 1.0}
    rounds.end(_disturb(child.run(0, first, lambda w: speed.get(w.arm, 0.04)), {arm}), out_of_time=True)  # and the budget
    assert screen.experiment is not None and screen.experiment.speedup < 0.2
    assert screen.experiment.verdict is Verdict.NOT_CONFIRMED and not screen.experiment.verified


def _small_bf16() -> Finding:
    return Finding("fp32 matmuls", "s", "medium", {}, Fix.unsafe("bf16", {"autocast": "bfloat16"}),
                   rule="fp32-matmul", code="PR001")


def test_a_second_pass_runs_only_for_the_fixes_the_first_left_undecided(tmp_path):
    """The plan adapts: a 2.5x fix is settled by its first pass (B A B); a 1.08x one gets the
    reverse pass in the next round. Still neither verified nor ruled out, it leans faster: it goes
    to the stack with the verified fix, whose windows decide it (a third pass alone would spend the
    time the stack needs: loader-starved's stack fitted its 1.5x budget in 2 runs of 5 that way)."""
    big, small = _dl001(), _small_bf16()
    rounds, child = Rounds(tmp_path), Child(tmp_path)
    first = rounds.start([big, small], _profile())
    bf16 = next(a for a, arm in rounds.arms.items() if arm.candidate.finding_index == 1)
    assert sum(w.arm == bf16 for w in first) == 1
    speed = {"baseline": 0.10, bf16: 0.0926}
    second = rounds.advance(child.run(0, first, lambda w: speed.get(w.arm, 0.04)))
    assert big.experiment is not None and big.experiment.verified and len(big.experiment.runs) == 1
    assert small.experiment is None and [w.arm for w in second if w.arm != "baseline"] == [bf16]
    third = rounds.advance(child.run(1, second, lambda w: speed[w.arm]))
    assert small.experiment is not None and len(small.experiment.runs) == 2 and not small.experiment.verified
    assert rounds.kind is RoundKind.STACK and {w.arm for w in third} - {"baseline"} == {"stacked"}


def test_a_fix_left_undecided_with_nothing_verified_to_stack_with_gets_a_third_pass(tmp_path):
    """1.08x alone, neither verified nor ruled out by two passes, and no verified fix to stack it
    with: a third pass (PASSES in all), then judged on every pass together."""
    small = _small_bf16()
    rounds, child = Rounds(tmp_path), Child(tmp_path)
    first = rounds.start([small], _profile())
    speed = {"baseline": 0.10, "a1": 0.0926}
    second = rounds.advance(child.run(0, first, lambda w: speed[w.arm]))
    assert small.experiment is None and [w.arm for w in second if w.arm != "baseline"] == ["a1"]
    third = rounds.advance(child.run(1, second, lambda w: speed[w.arm]))
    assert small.experiment is None and [w.arm for w in third if w.arm != "baseline"] == ["a1"]
    assert rounds.kind is RoundKind.CONFIRM
    rounds.advance(child.run(2, third, lambda w: speed[w.arm]))
    assert small.experiment is not None and len(small.experiment.runs) == 3  # every pass, pooled
    assert small.experiment.speedup == pytest.approx(1.08, rel=0.03)


def test_a_pass_a_neighbour_disturbed_is_measured_again(tmp_path):
    """The same 1.08x fix, its second pass's window set aside (a neighbour disturbed it): that pass is
    measured again, a fourth, and said as measured again; a quiet machine's run stops at PASSES."""
    small = _small_bf16()
    rounds, child = Rounds(tmp_path), Child(tmp_path)
    speed = {"baseline": 0.10, "a1": 0.0926}
    first = rounds.start([small], _profile())
    second = rounds.advance(child.run(0, first, lambda w: speed[w.arm]))
    disturbed = child.run(1, second, lambda w: speed[w.arm])
    disturbed.busy[next(line.window for line in disturbed.windows if line.arm == "a1")] = 1.0
    third = rounds.advance(disturbed)
    fourth = rounds.advance(child.run(2, third, lambda w: speed[w.arm]))
    assert small.experiment is None and [w.arm for w in fourth if w.arm != "baseline"] == ["a1"]
    assert rounds.kind is RoundKind.CONFIRM and rounds.replaced == 1
    rounds.advance(child.run(3, fourth, lambda w: speed[w.arm]))
    assert small.experiment is not None and len(small.experiment.runs) == 3  # the set-aside window in none


def test_an_arm_the_child_could_not_switch_goes_to_a_fresh_run(tmp_path):
    finding = Finding("fp32", "s", "high", {}, Fix.unsafe("fp16", {"autocast": "float16"}), rule="fp32-matmul", code="PR001")
    rounds, child = Rounds(tmp_path), Child(tmp_path)
    first = rounds.start([finding], _profile())
    refused = {"a1": {"autocast": "fp16 needs a GradScaler the running script does not have"}}
    assert rounds.advance(child.run(0, first, lambda w: 0.10, not_switchable=refused)) == []
    assert [c.overrides for c in rounds.fresh] == [{"autocast": "float16"}] and finding.experiment is None
    assert rounds.notes == ["fp32-matmul is measured in fresh runs of the script, not inside this run: "
                            "fp16 needs a GradScaler the running script does not have"]
    rounds.end(None)
    assert finding.experiment is None  # the fresh runs measure it


def test_an_arm_the_run_never_reached_is_not_measured_not_sent_to_a_fresh_run(tmp_path):
    finding, child = _dl001(), Child(tmp_path)
    rounds = Rounds(tmp_path)
    first = rounds.start([finding], _profile())
    rounds.end(child.run(0, first, lambda w: 0.10, stop_after=1))  # stopped after the first baseline window
    assert rounds.fresh == [] and finding.experiment.verdict == "not-measured" and "ended before" in finding.experiment.reason


@pytest.mark.slow
@pytest.mark.timing
def test_a_starved_loader_is_measured_inside_the_profiled_run(tmp_path):
    """No fresh child: the workers are switched on at step boundaries of the run that was profiled."""
    import subprocess

    started = time.monotonic()
    proc = subprocess.run(advise_cmd("profile", "--steps", "10", "--warmup", "2", "--profile-steps", "2",
                                     "--max-experiments", "2", "--out", "run", str(WORKLOADS / "starved_io.py")),
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)
    wall = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    dl001 = next(f for f in report["findings"] if f["code"] == "DL001")
    exp = dl001["experiment"]
    assert exp["measured_by"] == "in-process" and exp["verified"] and exp["speedup"] > 1.3, exp
    assert report["experiments"]["runs"] == []  # not one fresh child
    assert not (tmp_path / "run" / "experiments").exists()
    assert report["recommended"]["measured_by"] == "in-process" and report["recommended"]["verified"]
    assert len(report["steps"]) == 10  # the measured window stays the window; arm steps are not in it
    shown = proc.stdout + proc.stderr  # the progress names each window, its arm, and the time left
    assert "window 2 of " in shown and ": arm dataloader-starvation (num_workers=" in shown and "s of the time budget left" in shown
    assert wall < 120


@pytest.mark.slow
@pytest.mark.timing
def test_a_loader_that_has_workers_is_swept_from_the_proposal_and_its_figure_is_its_own(tmp_path):
    """A 4-worker loader waiting 6 ms a sample on I/O (issue 65: 2 ms, which a neighbour test's load hides): the rule's proposal (more workers)
    is measured first, no arm runs the script's own 4 (the baseline is that), nothing below it (its
    workers wait, they oversubscribe nothing), and the figure shown is of the value in its title.
    The plan's predicted seconds stand beside what each arm spent."""
    proc = subprocess.run(advise_cmd("profile", "--select", "DL001", "--out", "run", str(WORKLOADS / "starved_io.py"),
                                     "--workers", "4", "--item-ms", "6"),
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    dl001 = next(f for f in report["findings"] if f["code"] == "DL001")
    fix, exp = dl001["fix"], dl001["experiment"]
    proposed = (fix.get("proposed_overrides") or fix["overrides"])["dataloader"]["num_workers"]
    measured = exp["overrides"]["dataloader"]["num_workers"]
    assert proposed > 4 and exp["speedup"] is not None, exp
    assert fix["title"].startswith(f"Load batches in {measured} worker processes"), (fix["title"], exp["overrides"])
    rows = exp.get("sweep") or [{"overrides": exp["overrides"], "why": "the rule's proposal"}]
    assert rows[0]["overrides"]["dataloader"]["num_workers"] == proposed and rows[0]["why"] == "the rule's proposal"
    assert all(r["overrides"]["dataloader"]["num_workers"] > 4 for r in rows), rows
    arms = report["experiments"]["arms"]
    if exp.get("sweep"):  # (one value measured, the rest cut by the budget under load: no sweep, its arm named by value)
        assert {a["arm"] for a in arms} <= {"baseline", "dataloader-starvation", *(r.get("label") for r in rows)}, arms
    values = [re.fullmatch(r"dataloader-starvation(?: \(num_workers=(\d+)\))?", a["arm"]) for a in arms if a["arm"] != "baseline"]
    assert all(v and (v[1] is None or int(v[1]) > 4) for v in values), arms
    assert all(a["predicted_s"] > 0 and a["seconds"] > 0 for a in arms), arms
    assert "num_workers=4" not in json.dumps(arms)


@pytest.mark.slow
def test_a_fix_the_child_cannot_switch_is_measured_in_fresh_runs_that_finish(tmp_path):
    """An IterableDataset cannot be mirrored at a step boundary: the DataLoader fix goes to fresh
    runs, and no arm window is spent on it first (the window's account says what the loader is).
    Those children are plain runs: they must not wait for an arms plan nobody sends (found on an
    H100, where such a fresh baseline waited until --timeout)."""
    import subprocess

    proc = subprocess.run(advise_cmd("profile", "--steps", "8", "--warmup", "2", "--profile-steps", "2",
                                     "--max-experiments", "1", "--timeout", "90", "--out", "run",
                                     str(WORKLOADS / "starved_iterable.py")),
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    dl001 = next(f for f in report["findings"] if f["code"] == "DL001")
    exp = dl001["experiment"]
    assert exp["measured_by"] == "fresh-run", exp
    assert exp["verdict"] not in ("failed", "not-measured"), exp
    assert report["experiments"]["runs"], "the fallback ran no fresh child"
    assert all(r.get("status") == "ok" for r in report["experiments"]["runs"]), report["experiments"]["runs"]
    why = "dataloader-starvation is measured in fresh runs of the script, not inside this run: an IterableDataset"
    assert sum(w.startswith(why) for w in report["warnings"]) == 1, report["warnings"]  # said once, with the child's reason
    assert "measuring the fixes inside this run" not in proc.stdout and "interleaved with the baseline" not in proc.stdout


@pytest.mark.slow
@pytest.mark.timing
def test_confirm_measures_the_recommendation_again_in_fresh_runs(tmp_path):
    """--confirm: the in-process recommendation, then B R B R B fresh runs of the script with it."""
    import subprocess

    proc = subprocess.run(advise_cmd("profile", "--steps", "8", "--warmup", "2", "--profile-steps", "2",
                                     "--max-experiments", "1", "--confirm", "--out", "run", str(WORKLOADS / "starved_io.py")),
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    rec = report["recommended"]
    assert rec["measured_by"] == "in-process"
    confirmed = rec["confirmed"]
    assert confirmed["measured_by"] == "fresh-run" and confirmed["overrides"] == rec["overrides"]
    assert confirmed["speedup"] > 1.3 and confirmed["verified"], confirmed
    labels = [r["label"] for r in report["experiments"]["runs"]]
    assert labels == ["confirm-baseline", "confirm-recommended", "confirm-baseline", "confirm-recommended", "confirm-baseline"]
    assert "as you will apply it (fresh runs of the script, --confirm): " in proc.stdout
    page = (tmp_path / "run" / "report.html").read_text()
    assert "as you will apply it (fresh runs of the script, --confirm)" in page


@pytest.mark.slow
def test_untried_fixes_are_screened_in_the_run_and_kept_only_when_verified(tmp_path):
    """EXP001 alone (--select): the fused optimizer step and compile apply to this SGD loop and no
    rule proposed them. Each is measured in the profiled run; one that is not verified faster is
    left out of the findings and listed in experiments.screened, with its verdict; with
    --no-experiments nothing of them is reported. The compile arm's Inductor cache (150 MB, its
    precompiled header) went to the run dir and was removed, not to $TMPDIR/torchinductor_$USER."""
    import subprocess

    script = str(WORKLOADS / "tensor_pairs.py")
    # a compile screen (40 s of compiling predicted) is measured only with a budget that fits it
    common = ["--steps", "10", "--warmup", "2", "--profile-steps", "2", "--select", "EXP001", "--time-budget", "300"]
    (tmp := tmp_path / "tmp").mkdir()
    proc = subprocess.run(advise_cmd("profile", *common, "--out", "run", script), cwd=tmp_path, capture_output=True,
                          text=True, timeout=300,
                          env={**{k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR_")},
                               "TMPDIR": str(tmp)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    inductor = [p for p in tmp.rglob("*") if p.is_file() and "torchinductor" in str(p.relative_to(tmp))]
    assert not inductor, inductor[:5]  # (the script's first optimizer step imports dynamo: the empty folder is its own)
    assert not list((tmp_path / "run").glob(".inductor-cache*"))
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    kept = [f for f in report["findings"] if f["code"] == "EXP001"]
    screened = report["experiments"]["screened"]
    tried = [f["fix"]["overrides"] for f in kept] + [s["overrides"] for s in screened]
    assert {"compile": True} in tried and {"optimizer": {"fused": True}} in tried, (tried, proc.stdout)
    assert all(f["experiment"]["verified"] and f["experiment"]["measured_by"] == "in-process" for f in kept)
    assert all(s["verdict"] not in ("faster", "not-measured") and s["speedup"] for s in screened), screened
    off = subprocess.run(advise_cmd("profile", *common, "--no-experiments", "--out", "off", script), cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert off.returncode == 0 and "EXP001" not in off.stdout
    assert json.loads((tmp_path / "off" / "report.json").read_text())["findings"] == []


@pytest.mark.parametrize("speedup, low, high, verified, settled", [
    (9.2, 6.5, 13.7, True, True),     # a loader fix: its low end alone decides
    (1.56, 1.37, 1.78, True, False),  # one window's narrow interval: chargpt's bf16 was 1.16x by hand
    (2.05, 1.29, 3.68, True, False),  # a contended machine's wide interval: a second pass
    (1.10, 1.05, 1.15, True, False),  # a modest win: both passes
    (0.98, 0.95, 1.02, False, True),  # wholly below the bar a win must clear
    (1.01, 0.97, 1.06, False, False), # it might still be a win
])
def test_one_pass_settles_only_what_a_second_could_not_change(speedup, low, high, verified, settled):
    from advisor.experiments.judge import settled as is_settled
    from advisor.model import Experiment, Verdict

    exp = Experiment(Verdict.FASTER if verified else Verdict.NO_CHANGE, verified=verified, speedup=speedup,
                     ci_low=low, ci_high=high, baseline_drift_frac=0.0)
    assert is_settled(exp) is settled


def _arms_energy(out, samples_of) -> tuple[Finding, dict]:
    """A session whose child ran one round (the fix's steps 0.05 s, the baseline's 0.10 s); its energy
    added from the ticks `samples_of(spans)` makes of each window's (arm, start, end)."""
    out.mkdir()
    finding = _dl001()
    session = ArmsSession(out, "", diagnose=lambda: ([finding], _profile()))
    session.on_window_done(0, [""])
    child = Child(out)
    child.run(0, read_plan(out / "plan.json").windows, lambda w: 0.05 if w.overrides else 0.10)
    session.finish(child.lines)
    steps = pd.DataFrame([{"arm": s.arm, "window": s.window, "t_start": s.t_start, "t_end": s.t_end, "samples": s.samples}
                          for s in child.lines.arm_steps])
    spans = [(g["arm"].iloc[0], g["t_start"].min(), g["t_end"].max()) for _, g in steps.groupby("window")]
    session.add_energy(samples_of(spans))
    per_sample = {arm: (g["t_end"] - g["t_start"]).sum() / g["samples"].sum() for arm, g in steps.groupby(
        np.where(steps["arm"] == BASELINE, BASELINE, "fix"))}  # seconds per sample
    return finding, per_sample


def test_each_fix_and_its_baseline_read_their_joules_from_the_energy_counter(tmp_path):
    """The counter climbs at 300 W over the baseline's windows and 150 W over the fix's, while NVML
    power reads a stale 999 W throughout: the joules per sample follow the counter, both sides from
    the same source, and the words say which."""
    from advisor.reports import words

    def ticks(spans):
        grid = sorted({*np.arange(99.0, 106.0, 0.1).round(6), *(t for _, a, b in spans for t in (a, b))})
        watts = [next((300.0 if arm == BASELINE else 150.0 for arm, a, b in spans if a <= t < b), 60.0) for t in grid]
        mj = 1e9 + 1000.0 * np.concatenate([[0.0], np.cumsum(np.array(watts[:-1]) * np.diff(grid))])
        return pd.DataFrame({"t": grid, "gpu_power_w": 999.0, "gpu_energy_mj": mj})

    finding, per_sample = _arms_energy(tmp_path / "counter", ticks)
    base, cand = finding.experiment.baseline, finding.experiment.candidate
    assert base["energy_source"] == cand["energy_source"] == "energy-counter"
    assert base["joules_per_sample"] == pytest.approx(300.0 * per_sample[BASELINE])
    assert cand["joules_per_sample"] == pytest.approx(150.0 * per_sample["fix"])
    assert words.energy_effect(finding.experiment).endswith(", NVML energy counter)")

    def power_only(spans):  # a GPU before Volta: no counter column
        return ticks(spans).drop(columns="gpu_energy_mj")

    finding, per_sample = _arms_energy(tmp_path / "power", power_only)
    base, cand = finding.experiment.baseline, finding.experiment.candidate
    assert base["energy_source"] == cand["energy_source"] == "power-samples"
    assert cand["joules_per_sample"] == pytest.approx(999.0 * per_sample["fix"])
    assert words.energy_effect(finding.experiment).endswith(", NVML power samples)")


def test_a_script_that_raised_in_a_baseline_window_is_said_not_the_time_budget(tmp_path):
    """The script raised in the baseline window after the fix's (an error no arm's figure carries),
    and the arms' deadline passed while the child wound down: the note names the error, not the time
    budget, and the fix is judged on the windows before it."""
    finding = _dl001()
    session = ArmsSession(tmp_path, "", diagnose=lambda: ([finding], _profile()))
    session.on_window_done(0, [""])
    child = Child(tmp_path)
    child.run(0, read_plan(tmp_path / "plan.json").windows, lambda w: 0.05 if w.overrides else 0.10, stop_after=2)
    error = "RuntimeError: could not create a primitive descriptor for the LSTM forward propagation primitive."
    session.finish(child.lines, out_of_time=True, arms_error=error)
    assert any(n.startswith(f"the arms ended early: the script raised in a window ({error})") for n in session.notes), session.notes
    assert not any("time budget" in n for n in session.notes), session.notes
    assert finding.experiment is not None and finding.experiment.speedup == pytest.approx(2.0, rel=0.05)


def test_the_budget_grows_as_soon_as_a_window_a_neighbour_disturbed_ends(tmp_path):
    """The round's first window ran beside a neighbour that took a core from start to end: set aside,
    its seconds are added to the budget when it ends, not when the round does (which the budget
    it took may never reach), and once only."""
    finding = _dl001()
    session = ArmsSession(tmp_path, "", diagnose=lambda: ([finding], _profile()), cpu_count=2, time_budget_s=10.0)
    session.on_window_done(0, [""])
    budget, windows = session.time_budget_s, read_plan(tmp_path / "plan.json").windows
    assert windows[0].arm == BASELINE
    child = Child(tmp_path)
    child.run(0, windows, lambda w: 0.3, stop_after=1)
    end = max(s.t_end for s in child.lines.arm_steps)
    t = np.arange(99.0, end + 0.3, 0.1)
    on = (t >= 100.0) & (t <= end)
    pd.DataFrame({"t": t, "runq_wait_s": np.cumsum(np.where(on, 0.1, 0.002)), "sys_cpu_percent": 100.0,
                  "cpu_percent": np.where(on, 100.0, 200.0)}).to_csv(tmp_path / "samples.csv", index=False)
    given = session.on_arm_window(child.lines)
    assert given == pytest.approx(sum(s.duration_s for s in child.lines.arm_steps) + child.lines.arm_windows[0].switch_s)
    assert session.time_budget_s == pytest.approx(budget + given) and session.disturbed_s == pytest.approx(given)
    assert not session.on_arm_window(child.lines)
    session.finish(child.lines, out_of_time=True)
    assert session.disturbed_s == pytest.approx(given)


def test_a_busy_machine_leaves_no_in_process_claim_verified(tmp_path):
    """Other processes on a quarter of the cores while the arms ran: the figures stay, not confirmed,
    and the note says how busy; on a quiet machine the verdicts stand. The session runs as against a
    child: its plan file read back, the child's lines in, the run ended inside the round."""
    def judged(other_cores: float, gpu_others: float | None = None):
        out = tmp_path / f"run{other_cores}-{gpu_others}"
        out.mkdir()
        finding = _dl001()
        session = ArmsSession(out, "", diagnose=lambda: ([finding], _profile()))
        session.on_window_done(0, [""])
        plan = read_plan(out / "plan.json")
        child = Child(out)
        child.run(0, plan.windows, lambda w: 0.05 if w.overrides else 0.10)
        session.finish(child.lines)
        samples = pd.DataFrame({"t": np.arange(99.0, 110.0, 0.1), "cpu_percent": 100.0,
                                "sys_cpu_percent": (1.0 + other_cores) / 2 * 100})
        if gpu_others is not None:
            samples["gpu_other_procs"] = np.where(samples["t"] > 101.0, gpu_others, 0.0)  # it came in mid-way
        session.withhold_if_busy(samples, 2)
        return finding.experiment, session

    quiet, session = judged(0.1)
    assert quiet.verified and session.recommended.verified and not session.notes
    busy, session = judged(0.9)
    assert not busy.verified and busy.verdict.value == "not-confirmed" and busy.speedup == pytest.approx(2.0, rel=0.05)
    assert not session.recommended.verified and "0.9 of 2 cores" in busy.reason and session.notes == [busy.reason]
    shared, session = judged(0.1, gpu_others=1)  # a quiet CPU, another process on the same GPU
    assert not shared.verified and "1 other process ran on the script's GPU" in shared.reason


def test_a_round_that_does_not_fit_the_time_left_is_not_run_and_what_it_left_out_is_said(tmp_path):
    """A time budget is a normal end: the round after the first does not fit the time left, so it is
    not planned; the fix its first pass left undecided is settled on that pass, the batch ladder it
    would have measured is named as not measured, and the note counts the windows."""
    big, small = _dl001(), Finding("fp32 matmuls", "s", "medium", {}, Fix.unsafe("bf16", {"autocast": "bfloat16"}),
                                   rule="fp32-matmul", code="PR001")
    ladder = Finding("headroom", "s", "low", {}, Fix.unsafe("Double the batch size", {"batch_size_scale": 2}),
                     rule="memory-headroom", code="MEM001")
    rounds, child = Rounds(tmp_path), Child(tmp_path)
    first = rounds.start([big, small, ladder], _profile())
    bf16 = next(a for a, arm in rounds.arms.items() if arm.candidate.finding_index == 1)
    speed = {"baseline": 0.10, bf16: 0.0926}
    result = child.run(0, first, lambda w: speed.get(w.arm, 0.05))
    assert rounds.advance(result, time_left_s=0.5) == [] and rounds.kind is RoundKind.END  # a window takes >= 1 s
    assert small.experiment is not None and small.experiment.measured and len(small.experiment.runs) == 1
    assert rounds.recommended is not None and rounds.recommended.verified
    rounds.end(None)
    # the batch ladder is no longer last by construction: round 0 measured it beside the fixes
    assert ladder.experiment.measured and any(w.overrides == {"batch_size_scale": 2} for w in first)
    note = rounds.budget_note(6)
    assert note.startswith(f"the time budget (6 s) ended the experiments after {len(first)} of ")
    assert int(note.split(" of ")[1].split()[0]) > len(first)


def test_promoted_screens_are_measured_fastest_first_and_one_the_budget_never_reached_keeps_its_screen(tmp_path):
    """Three screens look faster in their short windows (1.15x, 1.25x, 1.45x, in the order the
    findings listed them); the pass that measures them in full runs the fastest first, and a budget
    that ends after its first windows leaves the last one reported with its screen's figure, not
    confirmed, never "not measured" (minGPT's adder: a doubled batch, its best by hand, read 1.30x in
    its screen and was then reported unmeasured in 3 of 5 runs)."""
    from advisor.model import SCREEN

    def screen(label, overrides):
        return Finding("untried", "s", "low", {SCREEN: True}, Fix.unsafe(label, overrides), rule="untried-fix", code="EXP001")

    slow, middle, fast = (screen("fused", {"optimizer": {"fused": True}}), screen("threads", {"torch_threads": 1}),
                          screen("bf16", {"autocast": "bfloat16"}))
    rounds, child = Rounds(tmp_path), Child(tmp_path)
    first = rounds.start([slow, middle, fast], _profile(), time_left_s=60.0)
    arm_of = {rounds.arms[a].candidate.finding_index: a for a in rounds.arms}
    gain = {arm_of[0]: 1.15, arm_of[1]: 1.25, arm_of[2]: 1.45}
    speed = lambda w: 0.1 / gain.get(w.arm, 1.0)  # noqa: E731
    second = rounds.advance(child.run(0, first, speed), time_left_s=60.0)
    assert rounds.kind is RoundKind.CONFIRM and set(rounds.verdicts.promoted) == set(gain)
    order = [w.arm for w in second if w.arm != "baseline"]
    assert order[:3] == [arm_of[2], arm_of[1], arm_of[0]]  # the fastest screen first
    # the budget ends after bf16 threads B (the round opens on round 0's last baseline): fused never ran
    rounds.end(child.run(1, second, speed, stop_after=3), out_of_time=True)
    assert fast.experiment.measured and fast.experiment.speedup == pytest.approx(1.45, rel=0.05)
    assert slow.experiment.verdict.value == "not-confirmed" and slow.experiment.speedup == pytest.approx(1.15, rel=0.05)
    assert "screened in one short window" in slow.experiment.reason


def test_a_screen_the_budget_cut_while_it_leaned_faster_is_named_with_its_reading(tmp_path):
    """Two screens in one short window each; the fused step reads 1.3x, the threads 1.0x, and the
    round that would confirm the fused step does not fit: it is undecided, with what its window read
    and one pass's predicted cost; the one that read no change is not (a pass could only confirm
    it), nor is anything when the budget did not end the rounds."""
    from advisor.model import SCREEN

    threads = Finding("untried", "s", "low", {SCREEN: True}, Fix.safe("Run 2 threads", {"torch_threads": 2}),
                      rule="untried-fix", code="EXP001")
    fused = _fused_screen()
    rounds, child = Rounds(tmp_path), Child(tmp_path)
    first = rounds.start([fused, threads], _profile(), time_left_s=60.0)
    fused_arm = next(a for a, arm in rounds.arms.items() if arm.candidate.finding_index == 0)
    assert fused_arm in {w.arm for w in first}
    assert rounds.undecided() == []  # nothing judged yet
    rounds.advance(child.run(0, first, lambda w: 0.1 / 1.3 if w.arm == fused_arm else 0.1), time_left_s=0.5)
    rounds.end(None)
    ((finding, cost),) = rounds.undecided()
    assert finding is fused and not fused.experiment.verified and fused.experiment.speedup > 1.2
    assert cost.seconds == rounds.spend.worth_of(fused_arm).seconds and cost.gain == fused.experiment.speedup - 1
    assert threads.experiment.verdict == "no-significant-change"

    roomy, child = Rounds(tmp_path / "roomy"), Child(tmp_path / "roomy")
    (tmp_path / "roomy").mkdir()
    first = roomy.start([_fused_screen(), threads], _profile())
    second = roomy.advance(child.run(0, first, lambda w: 0.1 / 1.3 if w.arm == fused_arm else 0.1))
    assert second and roomy.undecided() == []  # the budget did not end it: the next round decides it


def test_a_fix_whose_passes_ran_out_is_not_called_undecided_by_the_budget(tmp_path):
    """bf16 leaning 1.04x through its three passes, with the compile screen left out (the budget
    ended the rounds in that sense): its passes settled it, so a longer budget would not decide
    it; it is not named undecided."""
    screen, bf16 = _compile_screen(), _bf16()
    rounds, child = Rounds(tmp_path), Child(tmp_path)
    windows = rounds.start([screen, bf16], _profile(), time_left_s=30.0)
    assert rounds.left_out and rounds.out_of_time
    passes = 0
    while windows:
        passes += 1
        windows = rounds.advance(child.run(rounds.round, windows, lambda w: 0.1 if w.arm == BASELINE else 0.1 / 1.04),
                                 time_left_s=30.0)
    rounds.end(None)
    assert passes == 3 and not bf16.experiment.verified and bf16.experiment.speedup > 1.03, (passes, bf16.experiment)
    assert rounds.undecided() == []


def test_a_round_opens_on_the_baseline_window_the_round_before_closed_on(tmp_path):
    """bf16 at 1.2x is undecided on one pass (B A B), so a reverse pass follows: it opens on its arm
    (A B), the round before's closing baseline the one before it, measured once and counted once
    where both passes are pooled (three baseline windows, not four). Where that window ran during
    another process's burst, the next round opens on a baseline of its own."""
    from advisor.experiments import judge

    bf16 = _bf16()
    rounds, child = Rounds(tmp_path), Child(tmp_path)
    first = rounds.start([bf16], _profile())
    assert [w.arm for w in first] == [BASELINE, "a1", BASELINE]
    speed = lambda w: 0.1 if w.arm == BASELINE else 0.1 / 1.2  # noqa: E731
    zero = child.run(0, first, speed)
    second = rounds.advance(zero)
    assert [w.arm for w in second] == ["a1", BASELINE] and rounds.kind is RoundKind.CONFIRM
    one = child.run(1, second, speed)
    rounds.advance(one)
    assert one.opened_by is zero
    passes = [p for r in (zero, one) for p in r.pairs("a1", tmp_path)]
    assert [len(around) for around, _ in passes] == [2, 2] and passes[1][0][0] is passes[0][0][1]
    assert len(judge.distinct([m for around, _ in passes for m in around])) == 3
    assert len(bf16.experiment.runs) == 2

    (tmp_path / "busy").mkdir()
    busy, child = Rounds(tmp_path / "busy"), Child(tmp_path / "busy")
    zero = child.run(0, busy.start([_bf16()], _profile()), speed)
    zero.busy[zero.windows[-1].window] = 1.5
    assert busy.advance(zero)[0].arm == BASELINE


def test_a_first_round_is_planned_as_far_as_it_fits_and_ends_on_a_baseline(tmp_path):
    rounds = Rounds(tmp_path)
    everything = Rounds(tmp_path / "all").start([_dl001()], _profile())
    from advisor.experiments.spend import WINDOW_OVERHEAD_S

    fitted = rounds.start([_dl001()], _profile(),
                          time_left_s=sum(0.1 * (w.warmup + w.steps) + WINDOW_OVERHEAD_S for w in everything[:3]) + 0.05)
    assert [w.arm for w in fitted] == ["baseline", "a1", "baseline"][:len(fitted)] and len(fitted) in (0, 3)
    assert fitted and rounds.spend.cut == len(everything) - 3
    assert Rounds(tmp_path / "none").start([_dl001()], _profile(), time_left_s=0.01) == []


def test_a_group_that_does_not_fit_whole_runs_the_arms_that_fit_with_its_baseline(tmp_path):
    """Four workers' sweep on 8 cores (B 2w 4w B 8w B) with time for the baselines and the first arm
    only: that arm runs between its baselines (a whole-prefix fit ran nothing, minGPT's adder's
    batch x2 and 0 workers went undecided 5 runs of 5 for 0.05 s); what does not fit is cut."""
    everything = Rounds(tmp_path / "all")
    windows = everything.start([_dl001()], _profile(cores=8))
    assert [w.arm for w in windows] == ["baseline", "a1", "a2", "baseline", "a3", "baseline"]
    spend = everything.spend
    cost = [spend.window_s(w, spend.paces(), None) for w in windows]
    fitted = spend.fit(windows, time_left_s=cost[0] + cost[1] + cost[3] + 0.05)
    assert [w.arm for w in fitted] == ["baseline", "a1", "baseline"] and spend.cut == 3
    assert spend.fit(windows, time_left_s=sum(cost)) == windows and spend.fit(windows, cost[0] + cost[3]) == []


@pytest.mark.slow
def test_the_end_of_the_time_budget_is_a_normal_end(tmp_path):
    """A script that never ends, its loader in 2 worker processes (each batch 32 ms of loading or
    more), --time-budget 1: no window of DL001's fix fits what is left once the rules ran, so none is
    planned; the run is ok (exit 0), the warning counts the windows and names the fix left out, and
    the script ends at a step boundary, its log without a traceback."""
    proc = subprocess.run(advise_cmd("profile", "--steps", "10", "--warmup", "2", "--select", "DL001",
                                     "--time-budget", "1", "--out", "run", str(WORKLOADS / "forever_workers.py")),
                          cwd=tmp_path, capture_output=True, text=True, timeout=180)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert proc.returncode == 0 and report["status"] == "ok" and report.get("error") is None, proc.stderr[-2000:]
    (dl001,) = [f for f in report["findings"] if f["code"] == "DL001"]
    assert dl001["experiment"]["verdict"] == "not-measured" and "time budget" in dl001["experiment"]["reason"]
    said = [w for w in report["warnings"] if w.startswith("the time budget (1 s) ended the experiments after 0 of ")]
    assert len(said) == 1 and f"not measured: {dl001['fix']['title']}" in said[0], report["warnings"]
    assert "the time budget (1 s) ended the experiments" in proc.stdout  # the terminal says it too
    log = (tmp_path / "run" / "script.log").read_text()
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log[-3000:]


def _precision() -> Finding:
    tf32, bf16 = {"float32_matmul_precision": "high"}, {"autocast": "bfloat16"}
    return Finding("fp32 matmuls", "s", "high", {}, Fix.unsafe("tensor cores", tf32, ladder=[bf16, {**tf32, **bf16}]),
                   rule="fp32-matmul", code="PR001")


def test_the_precision_ladder_is_one_sweep_and_its_best_verified_step_leads_the_finding(tmp_path):
    """TF32 2.8x, bf16 3.9x, both 3.9x: one finding, three arms in one pass; bf16 leads (the best
    interval's low end), the sweep lists the three (TF32 from its one pass), and nothing is stacked
    with itself."""
    finding, child = _precision(), Child(tmp_path)
    rounds = Rounds(tmp_path)
    first = rounds.start([finding], _profile())
    points = [rounds.arms[a].point.overrides for a in rounds.arms]
    assert points == finding.fix.points() and len({w.arm for w in first} - {"baseline"}) == 3
    speed = {"a1": 0.1 / 2.8, "a2": 0.1 / 3.9, "a3": 0.1 / 3.85}
    again = rounds.advance(child.run(0, first, lambda w: speed.get(w.arm, 0.10)))
    # bf16 and both are one speed: the leader is re-measured head to head before one is named; TF32,
    # whose interval lies below bf16's, is out of the running: judged with them, not measured again
    assert rounds.kind is RoundKind.CONFIRM and {w.arm for w in again} - {"baseline"} == {"a2", "a3"}
    assert finding.experiment is None
    rest = rounds.advance(child.run(1, again, lambda w: speed.get(w.arm, 0.10)))
    assert rest == [] and finding.experiment.verified and finding.experiment.overrides == {"autocast": "bfloat16"}
    assert len(finding.experiment.sweep) == 3 and finding.fix.title == "Run the forward pass under bf16 autocast"
    assert rounds.recommended.overrides == {"autocast": "bfloat16"} and "stacked" not in rounds.arms
    (tie,) = [n for n in rounds.notes if "could not be told apart head to head" in n]
    assert "alone, the cheapest is taken: autocast=bfloat16" in tie, tie


@pytest.mark.parametrize("proposal", [2, 8])
def test_a_sweep_whose_top_values_tie_recommends_the_cheaper(tmp_path, proposal):
    """The issue's loader: 4 and 8 workers one speed (3.4x), 2 workers 2.4x. Whichever of 4 and 8 a
    noisy first pass puts ahead, both are measured again and the cheaper, 4, is named, with a
    line saying why, even where the rule proposed 8 and the sweep tried it first (the quickstart
    named 5 workers "the cheapest" beside 4 for that reason)."""
    finding, child = _dl001(proposal), Child(tmp_path)
    rounds = Rounds(tmp_path)
    first = rounds.start([finding], _profile(cores=8))
    speed = {0: 0.10, 2: 0.1 / 2.4, 4: 0.1 / 3.4, 8: 0.1 / 3.45}
    again = rounds.advance(child.run(0, first, lambda w: speed[_workers(w)]))
    assert rounds.kind is RoundKind.CONFIRM and again
    rounds.advance(child.run(1, again, lambda w: speed[_workers(w)]))
    assert finding.experiment.overrides == {"dataloader": {"num_workers": 4}} and finding.experiment.verified
    assert any("could not be told apart" in n and "num_workers=4" in n for n in rounds.notes), rounds.notes


def test_a_ladder_step_the_time_budget_ended_before_stays_in_the_sweep_as_not_measured(tmp_path):
    """The H200's imagenet run: its budget ended after two of the three compile modes, and the third
    was missing from the sweep as if never planned. Here the precision ladder's third step (both)
    has no window before the budget ends: the sweep lists it, not measured, and why."""
    finding, child = _precision(), Child(tmp_path)
    rounds = Rounds(tmp_path)
    first = rounds.start([finding], _profile())
    both = next(a for a, arm in rounds.arms.items() if len(arm.point.overrides) == 2)
    cut = next(k for k, w in enumerate(first) if w.arm == both)
    assert all(w.arm != both for w in first[:cut]) and {w.arm for w in first[:cut]} - {"baseline"}
    speed = {"a1": 0.1 / 2.8, "a2": 0.1 / 3.9}
    rounds.end(child.run(0, first, lambda w: speed.get(w.arm, 0.10), stop_after=cut), out_of_time=True)
    rows = {json.dumps(r["overrides"], sort_keys=True): r for r in finding.experiment.sweep}
    assert len(rows) == 3, rows
    last = rows['{"autocast": "bfloat16", "float32_matmul_precision": "high"}']
    assert last["verdict"] == "not-measured" and last["speedup"] is None and "time budget" in last["reason"], last
    assert finding.experiment.overrides == {"autocast": "bfloat16"} and finding.experiment.verified


def _two_winners(tmp_path, stacked_speed: float, no_effect: dict | None = None):
    """DL001 at 2.5x and bf16 at 3.9x, both verified alone, then their stack measured at `stacked_speed`."""
    dl, bf16 = _dl001(), Finding("fp32", "s", "high", {}, Fix.unsafe("bf16", {"autocast": "bfloat16"}),
                                 rule="fp32-matmul", code="PR001")
    rounds, child = Rounds(tmp_path), Child(tmp_path)
    first = rounds.start([dl, bf16], _profile())
    bf16_arm = next(a for a, arm in rounds.arms.items() if arm.candidate.finding_index == 1)
    speed = {"baseline": 0.10, bf16_arm: 0.1 / 3.9, "stacked": stacked_speed}
    second = rounds.advance(child.run(0, first, lambda w: speed.get(w.arm, 0.04)))
    assert rounds.kind is RoundKind.STACK and {w.arm for w in second} == {"baseline", "stacked"}
    rounds.advance(child.run(1, second, lambda w: speed[w.arm], no_effect=no_effect))
    rounds.end(None)
    return rounds, bf16


def test_a_stack_slower_than_a_member_alone_is_not_recommended_and_says_why(tmp_path):
    """The H100's case: the stack (3.0x, verified) measured below bf16 alone (3.9x): the member is
    recommended, and one line says the stack was no faster."""
    rounds, bf16 = _two_winners(tmp_path, stacked_speed=0.1 / 3.0)
    assert rounds.recommended.overrides == {"autocast": "bfloat16"}
    assert rounds.recommended.speedup == pytest.approx(3.9, rel=0.05)
    said = [n for n in rounds.notes if n.startswith("the stacked configuration (") and ") measured " in n]
    assert len(said) == 1 and "no faster than fp32-matmul alone (3.9" in said[0], rounds.notes
    (tmp_path / "faster").mkdir()
    faster, _ = _two_winners(tmp_path / "faster", stacked_speed=0.1 / 6.0)  # faster than either: the stack it is
    assert set(faster.recommended.overrides) == {"dataloader", "autocast"} and len(faster.recommended.fixes) == 2


def test_a_stack_whose_member_did_not_take_effect_fails_loudly(tmp_path):
    """The child's account of the stacked windows has no autocast: the stack measured only part of
    itself, so it is not verified whatever it read, and the note names the member."""
    rounds, _ = _two_winners(tmp_path, stacked_speed=0.1 / 3.9, no_effect={"stacked": ("autocast",)})
    assert rounds.recommended.overrides == {"autocast": "bfloat16"}
    said = [n for n in rounds.notes if "did not take effect whole" in n]
    assert len(said) == 1 and "no effect of autocast" in said[0], rounds.notes


def test_a_run_that_ends_in_the_stacks_round_with_nothing_of_it_back_recommends_the_best_fix(tmp_path):
    """Two fixes verified alone, then the run ends inside their stack's round before any of its
    windows came back: the best single fix is recommended, and the note says the stack was not
    measured (no recommendation at all, before)."""
    dl, bf16 = _dl001(), Finding("fp32", "s", "high", {}, Fix.unsafe("bf16", {"autocast": "bfloat16"}),
                                 rule="fp32-matmul", code="PR001")
    rounds, child = Rounds(tmp_path), Child(tmp_path)
    first = rounds.start([dl, bf16], _profile())
    bf16_arm = next(a for a, arm in rounds.arms.items() if arm.candidate.finding_index == 1)
    rounds.advance(child.run(0, first, lambda w: {"baseline": 0.10, bf16_arm: 0.1 / 3.9}.get(w.arm, 0.04)))
    assert rounds.kind is RoundKind.STACK
    rounds.end(None)
    assert rounds.recommended is not None and rounds.recommended.overrides == {"autocast": "bfloat16"}
    assert any("was not measured (the run ended first)" in n for n in rounds.notes), rounds.notes


def test_a_stack_window_settles_as_long_as_its_slowest_member(tmp_path):
    """The stack's warm-up is each member's at least (a new loader's prefetch, a compile's recompiles)."""
    rounds, _ = _two_winners(tmp_path, stacked_speed=0.1 / 3.0)
    stacked = rounds.arms["stacked"].point.overrides
    members = [rounds.arms[a].point.overrides for a in rounds.arms if a != "stacked"]
    assert all(rounds._sizing.warmup(stacked) >= rounds._sizing.warmup(m) for m in members)


def _compile_screen() -> Finding:
    from advisor.model import SCREEN

    return Finding("untried", "s", "low", {SCREEN: True}, Fix.unsafe("Compile the model", {"compile": True}),
                   estimated_gain_frac=0.2, rule="untried-fix", code="EXP001")


def _bf16(gain: float | None = 0.35) -> Finding:
    return Finding("fp32", "s", "high", {}, Fix.unsafe("bf16", {"autocast": "bfloat16"}), estimated_gain_frac=gain,
                   rule="fp32-matmul", code="PR001")


def test_the_budget_goes_first_to_the_most_gain_per_second(tmp_path):
    """A cheap arm with a large estimate (bf16, 1.5x expected, no compiling) is planned before an
    expensive one with a small estimate (a compile screen: 40 s of compiling predicted on a CPU
    before one was measured), whatever order the rules gave them in."""
    screen, bf16 = _compile_screen(), _bf16(gain=1 / 3)
    rounds = Rounds(tmp_path)
    first = rounds.start([screen, bf16], _profile())
    order = [rounds.arms[w.arm].candidate.finding(rounds.findings).code for w in first if w.arm != BASELINE]
    assert order == ["PR001", "EXP001"], order
    costs = {rounds.arms[a].candidate.finding(rounds.findings).code: rounds.spend.worth_of(a) for a in rounds.arms}
    assert costs["EXP001"].compile_s == 40.0 and costs["EXP001"].seconds > 40 > costs["PR001"].seconds
    assert costs["PR001"].density > 100 * costs["EXP001"].density


def _fused_screen() -> Finding:
    from advisor.model import SCREEN

    return Finding("untried", "s", "low", {SCREEN: True}, Fix.unsafe("Fused AdamW", {"optimizer": {"fused": True}}),
                   estimated_gain_frac=0.2, rule="untried-fix", code="EXP001")


def test_a_screen_is_started_only_beside_a_second_pass_of_the_rules_fixes(tmp_path):
    """A budget that fits bf16's window and a cheap screen's, but not bf16's reverse pass beside
    them, leaves the screen out and says why: a rule's fix undecided on one window needs its second
    pass more than an untried fix needs its first (chargpt's bf16 lost it to three screens). With
    room for that pass (a round of its own: B bf16 B) too, both are started."""
    unlimited = Rounds(tmp_path / "free")
    unlimited.start([_fused_screen(), _bf16()], _profile())
    spend = unlimited.spend
    worths = {unlimited.arms[a].role.value: spend.worth_of(a) for a in unlimited.arms}
    (fix,) = [a for a in unlimited.arms if unlimited.arms[a].role.value == "fix"]
    reverse_pass = spend.second_pass([fix], {fix: worths["fix"]})  # B bf16 B: a round of its own
    assert reverse_pass > worths["fix"].seconds + spend.baseline_s()
    first_two = spend.baseline_s() + worths["fix"].seconds + worths["screen"].seconds + 0.5  # and the windows' way
    rounds = Rounds(tmp_path / "tight")
    first = rounds.start([_fused_screen(), _bf16()], _profile(), time_left_s=first_two + 0.5 * reverse_pass)
    assert {rounds.arms[w.arm].role.value for w in first if w.arm != BASELINE} == {"fix"}
    (screen,) = rounds.left_out
    assert "a second pass of the rules' fixes" in rounds.spend.left_out_why(screen)
    roomy = Rounds(tmp_path / "roomy")
    first = roomy.start([_fused_screen(), _bf16()], _profile(), time_left_s=first_two + reverse_pass)
    assert {roomy.arms[w.arm].role.value for w in first if w.arm != BASELINE} == {"fix", "screen"}
    assert not roomy.left_out


def test_a_fix_for_a_peak_over_the_users_memory_budget_comes_first(tmp_path):
    """Checkpointing trades speed for memory (no speed gain expected), but with the peak over the
    budget the user gave it is what was asked: it is planned before bf16's 1.5x, and fits a budget
    that leaves bf16 out."""
    ckpt = Finding("over budget", "s", "high", {"budget_bytes": 80_000_000, "peak_memory_bytes": 115_000_000},
                   Fix.unsafe("checkpoint", {"activation_checkpointing": True}), estimated_gain_frac=None,
                   rule="memory-headroom", code="MEM001")
    rounds = Rounds(tmp_path)
    first = rounds.start([_bf16(gain=1 / 3), ckpt], _profile(), time_left_s=4.0)
    order = [rounds.arms[w.arm].candidate.finding(rounds.findings).code for w in first if w.arm != BASELINE]
    assert order[:1] == ["MEM001"], order
    assert "PR001" not in order and {rounds.arms[a].candidate.finding(rounds.findings).code
                                     for a in rounds.left_out} == {"PR001"}


def test_an_arm_predicted_to_outlast_the_budget_is_not_started_and_said(tmp_path):
    """With 15 s left, the compile screen (about 43 s predicted) is not started: bf16 alone is
    planned, and the screen is named as not measured with its predicted cost, never run half-way."""
    screen, bf16 = _compile_screen(), _bf16()
    rounds, child = Rounds(tmp_path), Child(tmp_path)
    first = rounds.start([screen, bf16], _profile(), time_left_s=15.0)
    arms = {w.arm for w in first} - {BASELINE}
    assert [rounds.arms[a].candidate.finding(rounds.findings).code for a in arms] == ["PR001"]
    (left,) = rounds.left_out.values()
    assert left.compile_s == 40.0 and left.seconds > 15
    speed = {a: 0.1 / 1.5 for a in arms}
    rounds.advance(child.run(0, first, lambda w: speed.get(w.arm, 0.10)), time_left_s=10.0)
    rounds.end(None)  # inside its second pass, nothing of which came back: judged on its first
    assert bf16.experiment.verified
    assert screen.experiment.verdict == "not-measured" and "predicted to take 4" in screen.experiment.reason
    assert "40 s of it compiling" in screen.experiment.reason
    ((finding, cost),) = rounds.spend.left_out_fixes()
    assert finding is screen and cost.seconds == left.seconds
    assert rounds.spend.costs()[0]["windows"] >= 1 and {c["arm"] for c in rounds.spend.costs()} >= {"baseline"}
    assert "once the fixes expected to gain more per second" in screen.experiment.reason
    alone = Rounds(tmp_path / "alone")  # nothing else planned: the reason names no fixes before it
    alone.start([_compile_screen()], _profile(), time_left_s=15.0)
    (arm,) = alone.left_out
    assert alone.spend.left_out_why(arm).endswith("more than the time budget had left for measuring fixes")


def test_a_compile_measured_once_predicts_the_next(tmp_path):
    """The first compilation's measured seconds stand for the rest (the prior only before it)."""
    from advisor.experiments.worth import compile_seconds

    assert compile_seconds({"compile": True}, "cpu", None) == 40.0
    assert compile_seconds({"compile": True}, "cuda:0", None) == 15.0
    assert compile_seconds({"compile": True}, "cuda", 3.5) == 3.5
    assert compile_seconds({"autocast": "bfloat16"}, "cpu", 3.5) == 0.0


def test_a_window_measured_during_a_burst_is_left_out(tmp_path):
    """A window during which other processes used the CPU is dropped from its fix's figures: the
    arm is judged on its other windows, against the quiet baselines; an arm none of whose windows
    was quiet keeps the figures of its busy ones, never verified, and says why."""
    bf16 = _bf16()
    rounds, child = Rounds(tmp_path), Child(tmp_path)
    first = rounds.start([bf16], _profile())
    (arm,) = {w.arm for w in first} - {BASELINE}
    result = child.run(0, first, lambda w: 0.1 / 1.5 if w.arm == arm else 0.10)
    burst = next(line.window for line in result.windows if line.arm == arm)
    result.busy[burst] = 1.4
    exp = rounds.outcome([result], arm)
    assert exp.speedup == pytest.approx(1.5, rel=0.1) and not exp.verified and exp.verdict == "not-confirmed"
    assert exp.reason.startswith("every window of it, or the baseline windows beside them, ran while other processes used the CPU")
    quiet = child.run(1, first, lambda w: 0.1 / 1.5 if w.arm == arm else 0.10)
    both = rounds.outcome([result, quiet], arm)  # the busy window left out, the quiet one judged
    assert both.verified and len(both.runs) == 1


def _winner_and_leaner(tmp_path, stacked_speed: float):
    """DL001 at 2x, verified alone, and a fused optimizer at 1.045x, which leans faster in every pass
    without clearing the bar; then whatever the rounds plan, the stack at `stacked_speed`."""
    fused = Finding("single-tensor", "s", "low", {}, Fix.safe("fused", {"optimizer": {"fused": True}}),
                    rule="single-tensor-optimizer-cpu", code="CPU002")
    rounds, child = Rounds(tmp_path), Child(tmp_path)
    windows = rounds.start([_dl001(), fused], _profile())
    fused_arm = next(a for a, arm in rounds.arms.items() if arm.candidate.finding_index == 1)
    speed = {"baseline": 0.10, fused_arm: 0.1 / 1.045, "stacked": stacked_speed}
    kinds, round_no = [], 0
    while windows:
        kinds.append(rounds.kind)
        windows = rounds.advance(child.run(round_no, windows, lambda w: speed.get(w.arm, 0.05)))
        round_no += 1
    rounds.end(None)
    return rounds, fused, kinds


def test_a_leaner_is_undecided_only_where_the_budget_cut_the_round_that_would_decide_it(tmp_path):
    """The fused step leans 1.045x beside DL001's verified 2x. Where the time left does not fit the
    round after its second pass (its stack's, or a third pass), it is named undecided, DL001 not;
    where the stack ran and settled it, it is not, even in a run whose budget left a screen out."""
    fused = Finding("single-tensor", "s", "low", {}, Fix.safe("fused", {"optimizer": {"fused": True}}),
                    rule="single-tensor-optimizer-cpu", code="CPU002")
    rounds, child = Rounds(tmp_path), Child(tmp_path)
    first = rounds.start([_dl001(), fused], _profile())
    fused_arm = next(a for a, arm in rounds.arms.items() if arm.candidate.finding_index == 1)
    speed = lambda w: {"baseline": 0.10, fused_arm: 0.1 / 1.045}.get(w.arm, 0.05)  # noqa: E731
    second = rounds.advance(child.run(0, first, speed))
    assert rounds.kind is RoundKind.CONFIRM and fused_arm in {w.arm for w in second}
    assert rounds.advance(child.run(1, second, speed), time_left_s=0.5) == []
    rounds.end(None)
    assert [f.code for f, _ in rounds.undecided()] == ["CPU002"]

    (tmp_path / "ran").mkdir()
    ran, _, kinds = _winner_and_leaner(tmp_path / "ran", stacked_speed=0.1 / 2.04)  # the stack ran: within the bar
    ran.out_of_time = True  # as if round 0 had left a screen out
    assert kinds[-1] is RoundKind.STACK and ran.undecided() == []


def _loading_then_fused(tmp_path, dl001_speed: float, stacked_speed: float, screen: bool = True):
    """DL001 at `dl001_speed`, and EXP001's fused step held for the loading fix (`after`; `screen`
    False: CPU002's, which took the screen's wait over); the stack, where the rounds plan one, at
    `stacked_speed`. Returns the rounds, every arm's overrides."""
    fused = Finding("fused", "s", "low", {SCREEN: True, AFTER: "dataloader"} if screen else {AFTER: "dataloader"},
                    Fix.safe("fused", {"optimizer": {"fused": True}}),
                    **({"rule": "untried-fix", "code": "EXP001"} if screen else {"rule": "single-tensor-optimizer-cpu", "code": "CPU002"}))
    rounds, child = Rounds(tmp_path), Child(tmp_path)
    windows = rounds.start([_dl001(), fused], _profile())
    speed = {"baseline": 0.10, "stacked": stacked_speed}
    seen, round_no = [], 0
    while windows:
        seen += [rounds.arms[w.arm].point.overrides for w in windows if w.arm in rounds.arms]
        windows = rounds.advance(child.run(round_no, windows, lambda w: speed.get(w.arm, 0.1 / dl001_speed)))
        round_no += 1
    rounds.end(None)
    return rounds, seen


def test_a_compute_fix_behind_a_waiting_loop_is_measured_only_stacked_on_the_loading_fix(tmp_path):
    """loader-starved's case: while the loop waits on loading, the fused step is never measured
    alone (it would measure the loader's hand-overs); once DL001 wins, it is stacked on it, and
    the stack is recommended where it beats DL001 alone by more than the bar. Without a loading
    win it is never measured."""
    rounds, seen = _loading_then_fused(tmp_path, dl001_speed=2.0, stacked_speed=0.1 / 2.4)
    assert {"optimizer": {"fused": True}} not in seen, seen  # never alone
    assert rounds.recommended.verified and rounds.recommended.overrides == {
        "dataloader": {"num_workers": 2}, "optimizer": {"fused": True}}, rounds.recommended
    said = [n for n in rounds.notes if n.startswith("untried-fix (fused=True) was measured only stacked on dataloader-starvation")]
    assert len(said) == 1 and "the stack measured 2.4" in said[0], rounds.notes

    (tmp_path / "near").mkdir()
    near, _ = _loading_then_fused(tmp_path / "near", dl001_speed=2.0, stacked_speed=0.1 / 2.03)
    assert near.recommended.overrides == {"dataloader": {"num_workers": 2}}, near.recommended

    (tmp_path / "no-win").mkdir()
    none, seen = _loading_then_fused(tmp_path / "no-win", dl001_speed=1.0, stacked_speed=0.1 / 2.4)
    assert none.recommended is None and all("optimizer" not in o for o in seen), seen

    for name, speed, said in (("rule", 2.0, "the recommended stack on the loading fix measured it"),
                              ("rule-no-win", 1.0, "no stack on a loading fix was recommended")):
        (tmp_path / name).mkdir()  # a rule's fused step (CPU002 over its bar) waits the same, and says so
        rule, seen = _loading_then_fused(tmp_path / name, dl001_speed=speed, stacked_speed=0.1 / 2.4, screen=False)
        owner = next(f for f in rule.findings if f.code == "CPU002")
        assert {"optimizer": {"fused": True}} not in seen and owner.experiment.verdict is Verdict.NOT_MEASURED
        assert owner.experiment.reason == f"{judge.AFTER_REASON}; {said}", owner.experiment


def test_the_stack_on_a_loading_fix_takes_the_most_loading_of_its_tied_values():
    """3 workers tied 2 alone (2.02x, 2.01x: the cheaper reported); the stack of the compute's fixes
    takes 3, as the loader must feed a shorter step; a value far below (1 worker) or unverified never."""
    def row(n: int, speedup: float, verdict: str = "faster") -> dict:
        return {"overrides": {"dataloader": {"num_workers": n}}, "speedup": speedup, "verdict": verdict}

    two = Experiment(Verdict.FASTER, verified=True, speedup=2.01, overrides={"dataloader": {"num_workers": 2}},
                     sweep=[row(1, 1.1), row(2, 2.01), row(3, 2.02), row(8, 2.05, "not-confirmed")])
    assert judge.with_headroom(two).overrides == {"dataloader": {"num_workers": 3}}
    assert two.overrides == {"dataloader": {"num_workers": 2}}  # the finding's own figure stays its own
    alone = Experiment(Verdict.FASTER, verified=True, speedup=2.01, overrides={"dataloader": {"num_workers": 2}},
                       sweep=[row(1, 1.1), row(2, 2.01), row(3, 1.5)])
    assert judge.with_headroom(alone) is alone


def test_a_fix_that_leans_faster_unverified_is_stacked_and_the_stack_decides(tmp_path):
    """The loader-starved script's case: more workers verify at 2x, a fused optimizer reads 1.05x in
    each pass and never clears the bar alone (by hand, with the workers, it adds 1.3x). It is
    stacked with the winner; a stack faster than the winner alone by more than the bar is
    recommended, with a line naming the unverified member; one within the bar is not."""
    rounds, fused, kinds = _winner_and_leaner(tmp_path, stacked_speed=0.1 / 2.6)
    assert not fused.experiment.verified and fused.experiment.speedup > 1.03, fused.experiment
    assert kinds[-1] is RoundKind.STACK and "stacked" in rounds.arms
    assert rounds.recommended.verified and rounds.recommended.overrides == {
        "dataloader": {"num_workers": 2}, "optimizer": {"fused": True}}, rounds.recommended.overrides
    assert rounds.recommended.speedup == pytest.approx(2.6, rel=0.05) and len(rounds.recommended.fixes) == 2
    said = [n for n in rounds.notes if f"without being verified; the stack measured {rounds.recommended.speedup:.2f}x" in n]
    assert len(said) == 1 and said[0].startswith("single-tensor-optimizer-cpu leaned faster alone (1.0"), rounds.notes
    (tmp_path / "near").mkdir()
    near, _, _ = _winner_and_leaner(tmp_path / "near", stacked_speed=0.1 / 2.04)  # within 3% of the winner alone
    assert near.recommended.overrides == {"dataloader": {"num_workers": 2}}
    said = [n for n in near.notes if n.startswith("the stacked configuration (") and ") measured " in n]
    assert len(said) == 1 and "not verified alone" in said[0], near.notes
