"""LOOP001 costly-loop-phases: an evaluation or a checkpoint that takes a large share of the wall
time, from the loop's phases (advisor.probe.phases) of a real child: tests/workloads/eval_and_checkpoint.py."""

from __future__ import annotations

import re

import pytest

from conftest import WORKLOADS
from rule_inputs import codes, profile_script


@pytest.mark.slow
def test_an_evaluation_every_few_steps_gets_a_manual_fix_with_its_share(tmp_path):
    """A validation pass 8x a training step every 4 steps: flagged high, with its share and how
    often; the checkpoints (a few ms) are under the bar."""
    report = profile_script(tmp_path, str(WORKLOADS / "eval_and_checkpoint.py"), "--every", "4", "--save-every", "4")
    f = codes(report)["LOOP001"]
    assert re.fullmatch(r"Evaluation takes \d+% of the wall time \((every \d steps|once in 6 measured steps)\)", f["title"])
    assert f["severity"] == "high" and f["fix"]["kind"] == "manual" and "islice" in f["fix"]["snippet"]
    share = next(p["share"] for p in report["phases"] if p["name"] == "evaluation")
    assert f["evidence"]["share"] == pytest.approx(share, abs=1e-3) and f["evidence"]["phase"] == "evaluation"
    assert sum(1 for g in report["findings"] if g["code"] == "LOOP001") == 1


@pytest.mark.slow
def test_an_every_step_eval_mode_forward_is_no_phase_and_no_finding(tmp_path):
    report = profile_script(tmp_path, str(WORKLOADS / "eval_and_checkpoint.py"), "--mode", "ema")
    assert "LOOP001" not in codes(report)
