"""GPU002 launch-bound: the GPU waits on the CPU to launch many short kernels.

Fixtures: the BERT H100 and low-utilisation A100 runs (short kernels on an idle GPU), and
GPU-bound or input-bound runs. How the compile ladder is measured: tests/test_compile_modes.py.
"""

from __future__ import annotations

import pytest

from rule_inputs import (BERT_H100, COMPILE_LADDER, DEEPSEEK, GPU_BOUND_V100, LAB_AMP, LOW_UTIL_A100, MI300_RESNET_AMP,
                         NW4, findings)


@pytest.mark.parametrize("trace", [BERT_H100, LOW_UTIL_A100])
def test_short_kernels_on_an_idle_gpu_are_launch_bound(trace):
    f = findings(trace, "GPU002")["GPU002"]
    assert f["evidence"]["gpu_busy_frac_outside_data_wait"] < 0.3
    assert f["fix"]["overrides"] == {"compile": True} and f["fix"]["applicability"] == "unsafe"
    assert f["fix"]["ladder"] == COMPILE_LADDER  # measured with the default as one sweep


@pytest.mark.parametrize("trace", [DEEPSEEK, GPU_BOUND_V100, NW4, LAB_AMP, MI300_RESNET_AMP])
def test_gpu_bound_or_input_bound_runs_are_not_launch_bound(trace):
    assert "GPU002" not in findings(trace, "GPU002")
