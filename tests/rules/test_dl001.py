"""DL001 dataloader-starvation: the training loop waits on its DataLoader.

Fixtures: the ResNet-50 pair recorded with num_workers=0 and 4 (tb_plugin's expected output: a
DataLoader flag on num_workers=0 only), the input-bound T4 lab runs, fed GPU runs, and probe-shaped
step tables. The zoo's planted scripts (tests/test_rules_zoo.py) run it end to end.
"""

from __future__ import annotations

import pandas as pd
import pytest

from advisor.engine import Settings
from advisor.profile import Profile
from rule_inputs import (CATALOGUE, DEEPSEEK, FUSED_ADAM_A100, GPU_BOUND_V100, LAB_AMP, LAB_FP32, MI300_RESNET_AMP,
                         NW0, NW0_B, NW4, NW4_B, findings, run_rules_json)

# --------------------------------------------------------------------------- on recorded traces


@pytest.mark.parametrize("trace, share", [(NW0, 0.334), (NW0_B, 0.23)])
def test_starved_resnet_is_flagged_like_tb_plugin(trace, share):
    f = findings(trace, "DL001")["DL001"]
    assert f["evidence"]["data_wait_frac"] == pytest.approx(share, abs=0.02)  # tb_plugin: 33.4% on the first
    assert f["severity"] in ("high", "medium") and f["evidence"]["basis"] == "trace ProfilerSteps"
    assert f["fix"]["kind"] == "automatic" and f["fix"]["applicability"] == "safe"
    assert f["fix"]["overrides"]["dataloader"]["num_workers"] >= 2 and f["fix"]["overrides"]["dataloader"]["pin_memory"]


@pytest.mark.parametrize("trace", [LAB_FP32, LAB_AMP])
def test_input_bound_t4_runs_are_flagged(trace):
    assert findings(trace, "DL001")["DL001"]["evidence"]["data_wait_frac"] > 0.5


@pytest.mark.parametrize("trace", [NW4, NW4_B, DEEPSEEK, FUSED_ADAM_A100, GPU_BOUND_V100, MI300_RESNET_AMP])
def test_fed_runs_are_not_called_starved(trace):
    assert "DL001" not in findings(trace, "DL001")


# --------------------------------------------------------------------------- on probe-shaped steps


def test_a_few_slow_steps_are_not_starvation():
    """An epoch boundary or a noisy neighbour makes a few steps wait; starvation is every step."""
    waits = [0.0005] * 10 + [0.2, 0.3]
    steps = pd.DataFrame({"index": range(12), "duration_s": [0.02] * 10 + [0.22, 0.32], "data_wait_s": waits,
                          "profiled": [False] * 12})
    assert run_rules_json(Profile(steps=steps), Settings(select=["DL001"]), CATALOGUE)[0] == []


def test_a_bursty_loader_is_starvation_from_its_totals():
    """4 workers that cannot keep up: three steps wait nothing and every fourth waits for the next
    burst (imagenet's 15 ms steps, then 150 ms). The median step waits 0 ms; the loop waits 69% of the time."""
    dur = [0.015, 0.015, 0.015, 0.150] * 5
    wait = [0.0, 0.0, 0.0, 0.135] * 5
    steps = pd.DataFrame({"index": range(20), "duration_s": dur, "data_wait_s": wait, "profiled": [False] * 20})
    profile = Profile(steps=steps, env={"device": "cpu", "cpu_count": 16, "torch_threads": 4},
                      observed={"dataloaders": [{"num_workers": 4, "batch_size": 32}]})
    (finding,), _ = run_rules_json(profile, Settings(select=["DL001"]), CATALOGUE)
    ev = finding["evidence"]
    assert ev["data_wait_frac"] == pytest.approx(0.692, abs=1e-3) and ev["data_wait_median_s"] == 0.0
    assert ev["waiting_steps"] == 5 and ev["stall_period_steps"] == 4 and ev["data_wait_max_s"] == pytest.approx(0.135)
    assert "5 of 20 steps waited, one in 4, up to 135 ms" in finding["summary"]
    assert finding["fix"]["overrides"]["dataloader"]["num_workers"] > 4  # more workers, not a manual fix


@pytest.mark.parametrize("wait_s, step_s, workers", [
    (0.002, 0.006, 0),   # a third of a tiny step, but 2 ms: an in-memory batch, not starvation
    (0.012, 0.080, 1),   # 15% with a worker: the shared-memory hand-over, not starvation
])
def test_small_or_handover_waits_are_not_starvation(wait_s, step_s, workers):
    steps = pd.DataFrame({"index": range(8), "duration_s": [step_s] * 8, "data_wait_s": [wait_s] * 8,
                          "profiled": [False] * 8})
    profile = Profile(steps=steps, observed={"dataloaders": [{"num_workers": workers, "batch_size": 32}]})
    assert run_rules_json(profile, Settings(select=["DL001"]), CATALOGUE)[0] == []
