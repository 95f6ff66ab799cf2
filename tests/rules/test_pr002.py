"""PR002 channels-first-conv: mixed-precision conv nets in NCHW that pay for layout transposes.

Fixtures: the MI300 ResNet AMP run (NCHW, transposes), and fp32 conv nets that need no advice.
"""

from __future__ import annotations

import pytest

from rule_inputs import DEEPSEEK, LOW_UTIL_A100, MI300_RESNET_AMP, NW0, findings


def test_amp_convnet_in_nchw_pays_for_transposes():
    f = findings(MI300_RESNET_AMP, "PR002")["PR002"]
    assert f["evidence"]["transpose_step_frac"] > 0.05 and f["fix"]["overrides"] == {"channels_last": True}


@pytest.mark.parametrize("trace", [LOW_UTIL_A100, NW0, DEEPSEEK])
def test_fp32_convnets_are_not_asked_for_channels_last(trace):
    assert "PR002" not in findings(trace, "PR002")
