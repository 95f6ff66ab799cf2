"""One wording for a measurement, whichever renderer says it: terminal, HTML page, markdown summary."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from advisor.model import Experiment, Finding, Fix, Recommendation, Severity, Verdict
from advisor.profile import Profile
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


def test_a_finding_without_a_measurement_says_estimate_or_not_measured():
    fix = Fix.manual("Read the loss every N steps", "+ x")
    with_estimate = Finding("t", "s", Severity.LOW, {}, fix, estimated_gain_frac=0.031)
    assert words.finding_sentence(with_estimate) == "estimate: up to 3% faster, by the rule's estimate (not measured)"
    assert words.finding_sentence(Finding("t", "s", Severity.LOW, {}, fix)) == "not measured"


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
    report = json.loads((GOLD_RUN / "report.json").read_text())
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
