"""CPU advice on real scripts: pytorch/examples' word_language_model with its own manual SGD held
quiet by every CPU rule, and the zero_grad override's took-effect check (fresh child and in-process arm).

Each CPU rule's own tests (nanoGPT for CPU001, word_language_model with AdamW for CPU002, the
grad-zeroing scripts for OPT002) are in tests/rules/test_<code>.py; the zoo (tests/test_rules_zoo.py)
runs the planted CPU001/CPU002/CPU003/OPT002 scripts and the healthy controls.
"""

from __future__ import annotations

import json

import pytest

from advisor.run_dir.atomic import write_json_atomic
from advisor.overrides import not_applied
from advisor.probe.runner import ProbeConfig, run_probe
from conftest import WORKLOADS
from rules.rule_inputs import WORD_LM, codes, profile_script as profile

pytestmark = pytest.mark.slow



def test_word_language_model_manual_sgd_has_no_optimizer_or_zeroing_finding(tmp_path):
    report = profile(tmp_path, *WORD_LM)
    assert report["step_source"] == "backward"
    assert not {"CPU001", "CPU002", "CPU003", "OPT002"} & set(codes(report))
    zero_grad = json.loads((tmp_path / "run" / "probe.json").read_text())["observed"]["zero_grad"]
    assert zero_grad["Module"]["calls"] >= 6 and zero_grad["Module"]["kept"] == 0


def test_zero_grad_override_takes_effect_in_a_fresh_child(tmp_path):
    run = run_probe(ProbeConfig(script=str(WORKLOADS / "zoo" / "zero_grad_keeps_grads.py"), out=tmp_path / "run",
                                warmup=1, steps=3, profile_steps=0, overrides={"zero_grad_set_to_none": True}))
    assert run.status == "ok"
    applied = run.probe.applied
    assert applied["zero_grad_set_to_none"] >= 4  # every zero_grad of the run was switched
    assert not_applied({"zero_grad_set_to_none": True}, applied) == []
    # the hooks still see what the script asked for
    assert run.probe.observed.zero_grad["Optimizer"].kept == run.probe.observed.zero_grad["Optimizer"].calls


def test_zero_grad_override_is_not_applied_where_grads_are_already_dropped(tmp_path):
    run = run_probe(ProbeConfig(script=str(WORKLOADS / "zoo" / "healthy_inmemory_mlp.py"), out=tmp_path / "run",
                                warmup=1, steps=3, profile_steps=0, overrides={"zero_grad_set_to_none": True}))
    assert run.status == "ok"
    assert "zero_grad_set_to_none" not in run.probe.applied
    assert not_applied({"zero_grad_set_to_none": True}, run.probe.applied) == ["zero_grad_set_to_none"]


def test_zero_grad_switch_in_process_only_inside_its_window(tmp_path):
    out = tmp_path / "run"
    plan = [{"arm": "base", "overrides": {}, "warmup": 1, "steps": 2},
            {"arm": "none", "overrides": {"zero_grad_set_to_none": True}, "warmup": 1, "steps": 2},
            {"arm": "base", "overrides": {}, "warmup": 1, "steps": 2}]
    sent = []

    def on_window_done(round_no: int, suffixes: list[str], lines) -> None:
        write_json_atomic(out / "plan.json", {"round": round_no, "windows": [] if sent else plan})
        sent.append(round_no)

    run = run_probe(ProbeConfig(script=str(WORKLOADS / "zoo" / "zero_grad_keeps_grads.py"), out=out, warmup=1, steps=3,
                                profile_steps=0, arms=True, plan_timeout_s=20, timeout_s=60, arms_budget_s=120),
                    on_window_done=on_window_done)
    windows = run.arms.arm_windows
    assert [w.arm for w in windows] == ["base", "none", "base"]
    assert [w.applied.get("zero_grad_set_to_none", 0) for w in windows] == [0, 3, 0]  # 1 warm-up + 2 steps
    assert all(w.error is None and not w.not_switchable for w in windows)

