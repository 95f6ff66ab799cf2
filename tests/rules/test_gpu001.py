"""GPU001 idle-gpu: the GPU's idle share of each step, attributed to a cause.

Fixtures: the starved ResNet-50 run (idle on the DataLoader), low-utilisation and launch-heavy
runs (idle on the host), and busy GPU runs. The NVML-only path (no trace) is tested with the
measured window it reads, in tests/test_metrics.py.
"""

from __future__ import annotations

import pytest

from rule_inputs import (BERT_H100, COMPILE_LADDER, DEEPSEEK, FUSED_ADAM_A100, GPU_BOUND_V100, LOW_UTIL_A100, MI250_TOY,
                         MI300_RESNET_AMP, NW0, NW4, NW4_B, TRITON_A100, findings)


def test_idle_gpu_is_attributed_to_the_dataloader_on_the_starved_run():
    f = findings(NW0, "GPU001")["GPU001"]
    ev = f["evidence"]
    assert 0.35 < ev["gpu_idle_frac"] < 0.55 and next(iter(ev["attributed_to"])) == "dataloader-starvation"
    assert ev["idle_data_wait_frac"] > ev["idle_cpu_overhead_frac"]
    # the fix names its cause only while that finding is in the report
    assert "DL001" not in f["fix"]["title"] and f["fix"]["snippet"] == "advise rules DL001"
    every = findings(NW0)
    assert "DL001" in every and "Fix the main cause first: dataloader-starvation (DL001)" == every["GPU001"]["fix"]["title"]


def test_idle_gpu_without_data_wait_points_at_the_cpu_side():
    ev = findings(LOW_UTIL_A100, "GPU001")["GPU001"]["evidence"]
    assert ev["gpu_idle_frac"] > 0.7 and next(iter(ev["attributed_to"])) == "launch-bound"


@pytest.mark.parametrize("trace", [TRITON_A100, MI250_TOY])
def test_a_gpu_idle_while_the_host_issues_work_carries_the_compile_ladder_where_launch_bound_is_silent(trace):
    """Few, long launches idle the GPU as much as many short ones: launch-bound's finer test stays
    silent, and the idle-gpu finding measures torch.compile's modes itself rather than saying
    'find what keeps the GPU waiting'. EXP001 screens no compile of its own beside it."""
    every = findings(trace)
    f = every["GPU001"]
    assert "GPU002" not in every and next(iter(f["evidence"]["attributed_to"])) == "launch-bound"
    assert f["fix"]["kind"] == "automatic" and f["fix"]["applicability"] == "unsafe"
    assert f["fix"]["overrides"] == {"compile": True} and f["fix"]["ladder"] == COMPILE_LADDER
    assert "reduce-overhead" in f["fix"]["title"] and "Find what keeps" not in f["fix"]["title"]
    assert "torch.compile's modes are measured as one fix" in f["summary"]
    assert every.get("EXP001", {}).get("fix", {}).get("overrides") != {"compile": True}


def test_an_idle_gpu_points_at_launch_bound_where_it_fired_and_launch_bound_carries_the_ladder():
    every = findings(BERT_H100)
    assert every["GPU001"]["fix"]["title"] == "Fix the main cause first: launch-bound (GPU002)"
    assert every["GPU002"]["fix"]["ladder"] == COMPILE_LADDER


@pytest.mark.parametrize("trace", [GPU_BOUND_V100, DEEPSEEK, NW4, NW4_B, FUSED_ADAM_A100, MI300_RESNET_AMP])
def test_busy_gpus_are_not_called_idle(trace):
    assert "GPU001" not in findings(trace, "GPU001")
