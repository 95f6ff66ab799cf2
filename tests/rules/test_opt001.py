"""OPT001 unfused-optimizer: a CUDA optimizer that updates parameters one tensor at a time.

Fixtures: the ResNet-50 num_workers=4 run (single-tensor SGD, 483 launches a step), runs with
fused or foreach optimizers, and the probe's optimizer flags over a trace. Its estimate from the
device's share of the step: tests/test_device_parts.py.
"""

from __future__ import annotations

import pytest

from advisor.engine import Settings, run_rules
from advisor.profile import Profile
from rule_inputs import CATALOGUE, FUSED_ADAM_A100, GPU_BOUND_V100, LAB_AMP, MI300_RESNET_AMP, NW4, findings, profile_of


@pytest.mark.parametrize("trace, launches", [(NW4, 483)])
def test_single_tensor_sgd_is_flagged(trace, launches):
    f = findings(trace, "OPT001")["OPT001"]
    assert f["evidence"]["implementation"] == "single-tensor"
    assert f["evidence"]["launches_per_optimizer_step"] == launches
    assert f["fix"]["overrides"] == {"optimizer": {"fused": True}}


@pytest.mark.parametrize("trace", [FUSED_ADAM_A100, GPU_BOUND_V100, MI300_RESNET_AMP, LAB_AMP])
def test_fused_or_foreach_optimizers_are_not_flagged(trace):
    assert "OPT001" not in findings(trace, "OPT001")


def test_probe_optimizer_flags_decide():
    probe = {"class": "AdamW", "fused": None, "foreach": False, "device": "cuda:0", "n_params": 10}
    base = profile_of(FUSED_ADAM_A100)
    prof = Profile(steps=base.steps, trace=base.trace, env=base.env, meta=base.meta, observed={"optimizers": [probe]})
    (f,), _ = run_rules(prof, Settings(select=["OPT001"]), CATALOGUE)
    f = f.to_dict()
    assert f["evidence"]["implementation"] == "single-tensor" and f["fix"]["overrides"] == {"optimizer": {"fused": True}}
