"""One wording for a measurement, whichever renderer says it: terminal, HTML page, markdown summary."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from advisor.model import Experiment, Finding, Fix, Recommendation, Severity, Verdict
from advisor.profile import Profile
from advisor.report import Report
from advisor.report_blocks import Memory, Mfu, Throughput
from advisor.reports import terminal, words
from advisor.reports.markdown import render_markdown
from advisor.reports.page import build_page

GOLD_RUN = Path(__file__).parent / "gold" / "rundir"


def exp(verdict: Verdict, speedup=None, lo=None, hi=None, **kw) -> Experiment:
    return Experiment(verdict, verified=verdict is Verdict.FASTER, speedup=speedup, ci_low=lo, ci_high=hi, **kw)


@pytest.mark.parametrize("result, state, label, sentence", [
    (exp(Verdict.FASTER, 1.71, 1.58, 1.84), "verified", "verified", "1.71× faster (95% CI 1.58–1.84×), verified"),
    (exp(Verdict.SLOWER, 0.93, 0.90, 0.96), "slower", "slower", "0.93×, 7% slower (95% CI 0.90–0.96×)"),
    (exp(Verdict.NO_CHANGE, 1.04, 0.97, 1.11), "unclear", "no clear gain",
     "1.04× faster (95% CI 0.97–1.11×): the interval includes no gain, not verified"),
    (exp(Verdict.LOSS_CHANGED, 1.30, 1.20, 1.40), "bad", "loss changed", "1.30× faster (95% CI 1.20–1.40×), loss changed"),
    (exp(Verdict.NOT_CONFIRMED, 1.12, 1.02, 1.22), "unclear", "not confirmed", "1.12× faster (95% CI 1.02–1.22×), not confirmed"),
    (exp(Verdict.NOT_APPLIED, 1.01, 0.98, 1.04, not_applied=["autocast"]), "not-run", "not applied",
     "not applied: autocast did not take effect in the script"),
    (exp(Verdict.NOT_APPLIED), "not-run", "not applied", "not applied: the override did not take effect in the script"),
    (exp(Verdict.FAILED, error="the candidate run exited with code 1"), "bad", "failed",
     "failed: the candidate run exited with code 1"),
    (Experiment.not_measured("experiment budget exhausted"), "not-run", "not measured", "not measured: experiment budget exhausted"),
])
def test_each_verdict_has_its_words(result, state, label, sentence):
    assert words.state_and_label(result) == (state, label)
    assert words.measured_sentence(result) == sentence
    assert words.verdict_words(result.verdict.value) == (state, label)


def test_every_verdict_of_the_model_is_worded():
    assert set(words.VERDICT_WORDS) == set(Verdict)
    assert words.verdict_words("not-applied") == ("not-run", "not applied")
    assert words.verdict_words("from-the-future") == ("unclear", "from-the-future")


def test_the_detail_is_the_sentence_without_its_label():
    assert words.measured_detail(exp(Verdict.FASTER, 1.71, 1.58, 1.84)) == "1.71× faster (95% CI 1.58–1.84×)"
    assert words.measured_detail(Experiment.not_measured("no time left")) == "no time left"
    assert words.measured_detail(exp(Verdict.NOT_APPLIED, 1.0, 0.9, 1.1, not_applied=["compile"])) == \
        "compile did not take effect in the script"


@pytest.mark.parametrize("rec, sentence", [
    (Recommendation(["a"], {}, verified=True, speedup=1.8, ci_low=1.66, ci_high=1.93), "1.80× faster (95% CI 1.66–1.93×), verified"),
    (Recommendation(["a"], {}, speedup=1.05, ci_low=0.98, ci_high=1.12),
     "1.05× faster (95% CI 0.98–1.12×): the interval includes no gain, not verified"),
    (Recommendation(["a"], {}, speedup=0.9, ci_low=0.85, ci_high=0.95), "0.90×, 10% slower (95% CI 0.85–0.95×)"),
    (Recommendation(["a"], {}), "not measured"),
])
def test_the_recommended_configuration_is_worded_like_an_experiment(rec, sentence):
    assert words.measured_sentence(rec) == sentence


def test_a_finding_without_a_measurement_says_estimate_or_why_not_measured():
    fix = Fix.manual("Read the loss every N steps", "+ x")
    with_estimate = Finding("t", "s", Severity.LOW, {}, fix, estimated_gain_frac=0.031)
    assert words.finding_sentence(with_estimate) == "about 1.03× faster, by the rule's estimate (not measured)"
    assert words.finding_sentence(Finding("t", "s", Severity.LOW, {}, fix)) == \
        "not measured: a manual fix (the experiments re-run only automatic ones)"
    auto = Finding("t", "s", Severity.LOW, {}, Fix.safe("More workers", {"dataloader": {"num_workers": 2}}))
    assert words.finding_sentence(auto, "off") == "not measured: experiments were off (--no-experiments)"
    assert words.finding_sentence(auto, "not-run") == "not measured: the run did not finish, so no experiment ran"
    budget = Finding("t", "s", Severity.LOW, {}, auto.fix, estimated_gain_frac=0.5,
                     experiment=Experiment.not_measured("experiment budget exhausted"))
    assert words.finding_sentence(budget) == \
        "about 2.0× faster, by the rule's estimate; not measured: experiment budget exhausted"


@pytest.mark.parametrize("gain, words_", [
    (0.72, "about 3.6× faster"),   # 72% of the step saved: 1 / 0.28, not "73% faster"
    (0.031, "about 1.03× faster"),
    (0.5, "about 2.0× faster"),
    (0.95, "about 20× faster"),
    (1.0, "about 100× faster"),    # capped: the step cannot vanish
])
def test_an_estimate_is_a_speedup_in_the_unit_measurements_use(gain, words_):
    from advisor.model import estimated_speedup

    assert words.estimate_speedup_words(gain) == words_
    assert estimated_speedup(gain) == pytest.approx(1 / (1 - min(gain, 0.99)))
    assert words.estimate_sentence(gain) == f"{words_}, by the rule's estimate (not measured)"
    assert words.estimate_speedup_words(0) == words.estimate_speedup_words(None) == ""


def test_a_fix_has_one_label_from_its_kind_and_applicability():
    assert words.fix_label(Fix.safe("w", {"dataloader": {"num_workers": 2}})) == "automatic; safe: numerics unchanged"
    assert words.fix_label(Fix.unsafe("bf16", {"autocast": "bfloat16"})) == \
        "automatic; unsafe: may change numerics or memory; check the loss"
    assert words.fix_label(Fix.manual("accumulate", "+ x")) == "manual: a code change to make by hand"


def test_the_outcome_is_one_line_whatever_happened():
    safe = Fix.safe("More workers", {"dataloader": {"num_workers": 2}})
    slower = Finding("a", "s", Severity.HIGH, {}, safe, code="DL001", experiment=exp(Verdict.SLOWER, 0.9, 0.85, 0.95))
    unclear = Finding("b", "s", Severity.LOW, {}, safe, code="OPT001", experiment=exp(Verdict.NO_CHANGE, 1.01, 0.97, 1.05))
    manual = Finding("c", "s", Severity.LOW, {}, Fix.manual("m", "+ x"), code="GPU003")
    ran = Report.of({"status": "ok", "experiments": {"n_runs": 5}})
    assert words.outcome([], None, ran) == ("none: no bottleneck found", "not-run")
    assert words.outcome([slower, unclear, manual], None, ran) == \
        ("none: 2 fixes measured, none faster (1 slower, 1 no clear gain)", "unclear")
    assert words.outcome([manual], None, ran)[0] == "none: every fix found is a manual code change; nothing could be measured"
    assert words.outcome([slower], None, Report.of({"status": "ok"}))[0] == "none: experiments were off (--no-experiments)"
    assert words.outcome([slower], None, Report.of({"status": "failed"}))[0] == "none: the run did not finish"
    rec = Recommendation(["a"], {}, verified=True, speedup=1.8, ci_low=1.66, ci_high=1.93)
    assert words.outcome([slower], rec, ran) == ("1.80× faster (95% CI 1.66–1.93×), verified", "verified")


def test_a_gain_under_the_bar_says_why_it_is_not_verified():
    small = exp(Verdict.NO_CHANGE, 1.04, 1.01, 1.07)
    assert words.measured_sentence(small) == \
        "1.04× faster (95% CI 1.01–1.07×): the interval's low end is within 3% of 1, too close to call it verified"
    drifted = exp(Verdict.NO_CHANGE, 1.10, 1.05, 1.15, baseline_drift_frac=0.08)
    assert "within 8% of 1 (the baselines drifted that much between their runs)" in words.measured_sentence(drifted)
    assert words.VERIFIED_MEANS.startswith("means the whole 95% interval lies more than 3% above 1")
    noisy = exp(Verdict.NO_CHANGE, 1.64, 1.22, 1.74, baseline_drift_frac=1.69)
    assert words.measured_sentence(noisy) == ("1.64× faster (95% CI 1.22–1.74×): the baseline's own windows differ by "
                                              "169%: the machine's load changed during the run, too noisy to call it verified")


def test_passes_that_disagree_are_named_not_pooled_into_a_precise_interval():
    from advisor.experiments.judge import apart as _apart

    passes = [exp(Verdict.NO_CHANGE, 0.96, 0.90, 1.02), exp(Verdict.FASTER, 9.37, 8.1, 10.2)]
    assert _apart(passes) and not _apart([passes[0], exp(Verdict.NO_CHANGE, 1.0, 0.95, 1.05)])
    pooled = exp(Verdict.NOT_CONFIRMED, 1.64, 1.22, 1.74,
                 reason="its 2 passes disagree (0.96x, 9.37x, intervals apart): the machine's load changed during the run")
    assert words.measured_sentence(pooled).endswith("(0.96x, 9.37x, intervals apart): the machine's load changed during "
                                                    "the run, not confirmed")


def test_a_side_without_a_figure_shows_a_dash_and_why():
    failed = exp(Verdict.FAILED, error="the candidate run exited with code 1",
                 baseline={"runs": 2, "samples_per_s": 4905.1}, candidate={"runs": 1, "samples_per_s": None})
    assert words.pair_words(failed) == ("4,905.1 samples/s", "–", "no run finished: the candidate run exited with code 1")
    both = exp(Verdict.FASTER, 1.5, 1.4, 1.6, baseline={"samples_per_s": 100.0}, candidate={"samples_per_s": 150.0})
    assert words.pair_words(both) == ("100.0 samples/s", "150.0 samples/s", "")
    assert words.pair_words(Experiment.not_measured("no time")) == ("", "", "")


def test_plural_and_memory_and_wall_words():
    assert [words.plural(n, w) for n, w in ((1, "fix"), (2, "fix"), (3, "step"))] == ["1 fix", "2 fixes", "3 steps"]
    assert words.memory_words(Memory(peak_rss_bytes=900 * 2**20, peak_pss_bytes=400 * 2**20, basis="pss")) == \
        "400.0 MiB (PSS of the script's processes; RSS summed 900.0 MiB)"
    assert words.memory_words(Memory(peak_rss_bytes=900 * 2**20, basis="rss")) == \
        "900.0 MiB (RSS summed over the script's processes)"
    assert words.memory_words(Memory()) == ""
    report = Report.of({"wall_s": 4.6, "total_wall_s": 23.04, "experiments": {"n_runs": 5, "child_wall_s": 17.5}})
    assert words.wall_words(report) == "took 23.04 s in all (the profiled run 4.60 s, experiments 17.50 s in 5 runs)"
    assert words.wall_words(Report.of({"wall_s": 4.6})) == "the profiled run took 4.60 s"


def test_the_baseline_and_the_headline_are_told_apart():
    note = words.baseline_vs_headline(Throughput(samples_per_s=312.4), {"runs": 4, "samples_per_s": 217.4})
    assert note.startswith("The experiments' baseline, 217.4 samples/s, is 30% below the headline 312.4 samples/s: "
                           "it was measured in 4 fresh runs of the script without the profiler")
    assert words.baseline_vs_headline(Throughput(samples_per_s=312.4), {"samples_per_s": 320.0}) == ""  # within 5%


@pytest.mark.parametrize("check, text, state", [
    (None, "", ""),
    ({"checked": True, "finite": True, "passed": True, "baseline_mean": 2.0914, "candidate_mean": 2.0921, "tolerance": 0.2091},
     "loss check passed: mean 2.092 vs 2.091 (tolerance ±0.21)", "ok"),
    ({"checked": True, "finite": False, "passed": False}, "loss check failed: the loss was not finite", "bad"),
    ({"checked": False, "reason": "no loss seen"}, "loss not checked: no loss seen", ""),
    (False, "loss check failed", "bad"),
])
def test_loss_checks_are_worded(check, text, state):
    assert words.loss_words(check) == (text, state)


def test_the_terminal_ranks_and_words_findings_as_the_page_does():
    report = Report.of(json.loads((GOLD_RUN / "report.json").read_text()))
    page = build_page(report, Profile.from_run_dir(GOLD_RUN))
    con = Console(file=io.StringIO(), width=400, record=True, color_system=None)
    terminal.print_summary(report, con)
    text = con.export_text()
    codes = [line.split()[0] for line in text.splitlines() if line.startswith("  ") and not line.startswith("   ")]
    assert codes == [f.code for f in page.findings] == ["DL001", "GPU004", "PR001", "GPU003", "MEM001", "OPT001"]
    for f in page.findings:
        assert f.experiment.sentence in text, f.code  # the same sentence the page and the markdown table show
    md = render_markdown(page)
    assert all(f.experiment.sentence in md for f in page.findings)
    assert f"recommended: {page.recommended.fixes}  {page.recommended.result.sentence}" in text
    assert page.verdict.gain == page.recommended.result.sentence == "1.80× faster (95% CI 1.66–1.93×), verified"


def test_mfu_is_said_against_the_dtype_peak_or_as_a_rate_alone():
    gpu = {"achieved_tflops": 5.62, "peak_tflops": 15.7, "mfu": 5.62 / 15.7, "dtype": "fp32"}
    assert words.mfu_words(Mfu.of(gpu)) == ("35.8%", "5.62 TFLOP/s of the 15.7 TFLOP/s dense fp32 peak")
    cpu = {"achieved_tflops": 0.012, "peak_tflops": None, "mfu": None, "dtype": "fp32",
           "peak_source": "CPU run: no peak table for CPUs"}
    assert words.mfu_words(Mfu.of(cpu)) == ("12.00 GFLOP/s achieved", "fp32; CPU run: no peak table for CPUs")
    assert words.mfu_words(None) == ("", "")


def test_a_compile_fix_says_when_its_compilation_is_paid_back():
    from advisor.experiments.judge import payoff_steps

    exp = Experiment(Verdict.FASTER, verified=True, speedup=1.25, ci_low=1.2, ci_high=1.3, overrides={"compile": True},
                     measured_by="in-process", switch_s=2.7, baseline={"step_time_median_s": 0.050},
                     candidate={"step_time_median_s": 0.040})
    exp.payoff_steps = payoff_steps(exp)
    assert exp.payoff_steps == 270  # 2.7 s over 10 ms saved a step
    assert words.measured_sentence(exp).endswith("in the profiled run; compiling took 2.70 s, once, paid back after 270 steps")
    slower = Experiment(Verdict.SLOWER, speedup=0.8, overrides={"compile": True}, switch_s=2.7,
                        baseline={"step_time_median_s": 0.040}, candidate={"step_time_median_s": 0.050})
    assert payoff_steps(slower) is None and payoff_steps(Experiment(Verdict.FASTER, overrides={"autocast": "bfloat16"},
                                                                     switch_s=1.0)) is None


def test_the_time_line_names_what_the_budget_left_without_a_verdict_with_one_command_per_rule():
    """A screen not started and two cut while they leaned faster, all EXP001's: each said with its
    predicted cost or its reading, the rule's one command once, after them; a fix of another rule
    with its own command."""
    from advisor.report_blocks import ArmCost, Experiments, LeftOut

    exp001 = "advise profile --select EXP001 --time-budget 120 adder.py"
    block = Experiments(budget_s=13.0, budget_given=False, arms=[ArmCost(arm="baseline", windows=3, seconds=3.2)],
                        left_out=[LeftOut(fix="Compile the model", code="EXP001", predicted_s=42.3, compile_s=40.0,
                                          command=exp001),
                                  LeftOut(fix="Double the batch size", code="EXP001", predicted_s=2.1, command=exp001,
                                          speedup=1.36, ci_low=1.21, ci_high=1.52),
                                  LeftOut(fix="Fused AdamW", code="EXP001", predicted_s=1.2, command=exp001,
                                          speedup=1.13, ci_low=1.01, ci_high=1.27),
                                  LeftOut(fix="bf16", code="PR001", predicted_s=8.0, command="advise profile --select "
                                          "PR001 --time-budget 40 adder.py", speedup=1.2, ci_low=0.98, ci_high=1.45)])
    line = words.time_spent(block)
    assert line == ("fixes measured in 3.20 s of a 13 s budget (automatic): the baseline 3.20 s in 3 windows; "
                    "not measured: Compile the model (predicted 42 s, 40 s of it compiling); not decided when the "
                    "budget ended: Double the batch size (1.36× faster, 95% CI 1.21–1.52×), Fused AdamW (1.13× "
                    f"faster, 95% CI 1.01–1.27×): {exp001}; not decided when the budget ended: bf16 (1.20× faster, "
                    "95% CI 0.98–1.45×): advise profile --select PR001 --time-budget 40 adder.py"), line
    bare = Experiments(left_out=[LeftOut(fix="bf16", code="PR001", predicted_s=8.0, command="advise x", speedup=1.2)])
    assert words.time_spent(bare) == "fixes measured in 0 µs; not decided when the budget ended: bf16 (1.20× faster): advise x"
    # what ran outside the windows' steps is added, so the total is the budget spent; a plan's way alone is not said
    spent = Experiments(budget_s=5.0, arms=[ArmCost(arm="baseline", windows=2, seconds=1.5)], between_steps_s=1.05,
                        cut_window_s=0.8)
    assert words.time_spent(spent) == ("fixes measured in 3.35 s of a 5 s budget (automatic): the baseline 1.50 s in 2 "
                                       "windows, between the steps 1.05 s (the script waiting while each round was "
                                       "planned, switching between windows, and any evaluation, checkpoint or loader "
                                       "restart), a window the budget "
                                       "ended inside 800.0 ms (not read)")
    grown = Experiments(budget_s=8.0, disturbed_s=3.2, arms=[ArmCost(arm="baseline", windows=2, seconds=4.5)])
    assert words.time_spent(grown) == ("fixes measured in 4.50 s of a 8 s budget (automatic, 3 s of it added for the "
                                       "windows a neighbour disturbed): the baseline 4.50 s in 2 windows")
    held = Experiments(budget_s=9.0, disturbed_s=1.0, held_s=3.4, arms=[ArmCost(arm="baseline", windows=2, seconds=4.5)])
    assert words.time_spent(held) == ("fixes measured in 4.50 s of a 9 s budget (automatic, 1 s of it added for the "
                                      "windows a neighbour disturbed, 3 s of it added while the windows waited for a "
                                      "neighbour to leave the cores): the baseline 4.50 s in 2 windows")
    brief = Experiments(budget_s=5.0, arms=[ArmCost(arm="baseline", windows=2, seconds=4.5)], between_steps_s=0.3)
    assert words.time_spent(brief) == "fixes measured in 4.50 s of a 5 s budget (automatic): the baseline 4.50 s in 2 windows"
