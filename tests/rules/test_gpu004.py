"""GPU004 cudnn-benchmark: fixed-shape convolutions trained with cudnn.benchmark off.

Fixtures: the ResNet-50 run with the probe's cudnn_benchmark flag set either way, and a run
without convolutions.
"""

from __future__ import annotations

from rule_inputs import FUSED_ADAM_A100, NW0, findings


def test_cudnn_benchmark_off_with_fixed_conv_shapes():
    f = findings(NW0, "GPU004", cudnn_benchmark=False)["GPU004"]
    assert f["evidence"]["conv_kernel_frac"] > 0.5 and f["fix"]["overrides"] == {"cudnn_benchmark": True}


def test_cudnn_benchmark_needs_the_flag_from_the_probe():
    assert findings(NW0, "GPU004") == {}  # a trace does not say how the flag was set
    assert findings(NW0, "GPU004", cudnn_benchmark=True) == {}
    assert findings(FUSED_ADAM_A100, "GPU004", cudnn_benchmark=False) == {}  # no convolutions
