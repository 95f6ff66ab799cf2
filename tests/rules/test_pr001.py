"""PR001 fp32-matmul: FP32 matmuls and convolutions on a device with faster lower-precision units.

Fixtures: the ResNet-50 pair (V100, tb_plugin: 68% of kernel time in tensor-core-eligible ops),
the fp32 T4 lab run, mixed-precision and fp8 runs that need no advice, and a CPU trace of FP32
matmuls recorded here. The zoo's planted script (tests/test_rules_zoo.py) runs it end to end.
"""

from __future__ import annotations

import pytest

from advisor.engine import Settings, run_rules
from advisor.profile import Profile
from rule_inputs import (BERT_H100, CATALOGUE, DEEPSEEK, LAB_AMP, LAB_FP32, MI300_RESNET_AMP, NW0, NW4, QWEN_BF16,
                         findings, profile_of, run_rules_json)

# --------------------------------------------------------------------------- on recorded GPU traces


@pytest.mark.parametrize("trace", [NW0, NW4])
def test_fp32_resnet_on_v100_gets_fp16_autocast_not_tf32(trace):
    f = findings(trace, "PR001")["PR001"]
    assert f["evidence"]["fp32_gemm_kernel_frac"] == pytest.approx(0.68, abs=0.03)  # tb_plugin: 68%
    assert f["evidence"]["device_capability"] == "7.0"
    assert f["fix"]["overrides"] == {"autocast": "float16"} and "GradScaler" in f["fix"]["snippet"]
    assert f["fix"]["applicability"] == "unsafe" and "TF32" not in f["fix"]["title"]


def test_fp32_on_turing_gets_fp16_autocast():
    f = findings(LAB_FP32, "PR001")["PR001"]
    assert f["evidence"]["device_capability"] == "7.5" and f["fix"]["overrides"] == {"autocast": "float16"}


def test_the_advice_follows_the_device_capability():
    ampere = findings(NW0, "PR001", device_capability="8.0")["PR001"]
    assert ampere["fix"]["overrides"] == {"float32_matmul_precision": "high"}
    # Convolutions already run on TF32 by default on Ampere (cudnn.allow_tf32): bf16 is what is left.
    assert findings(NW0, "PR001", device_capability="8.0", cudnn_allow_tf32=True)["PR001"]["fix"]["overrides"] == \
        {"autocast": "bfloat16"}
    assert findings(NW0, "PR001", device_capability="6.0") == {}  # Pascal: no tensor cores, no claim


def test_fp32_matmuls_have_one_precision_ladder_on_a_device_with_tf32_and_bf16():
    """TF32, bf16 autocast and both are one fix of one finding, measured as one sweep: the screen of
    bf16 autocast no rule would otherwise own (EXP001) is left out, not told as a second story."""
    found, _ = run_rules(profile_of(NW0, device_capability="8.0"), Settings(select=["PR001", "EXP001"]), CATALOGUE)
    pr001 = next(f for f in found if f.code == "PR001")
    tf32, bf16 = {"float32_matmul_precision": "high"}, {"autocast": "bfloat16"}
    assert pr001.fix.points() == [tf32, bf16, {**tf32, **bf16}]
    assert "bf16 autocast" in pr001.fix.title and "10-bit mantissa" in pr001.summary and "half the memory" in pr001.summary
    assert not [f for f in found if f.screen and f.fix.overrides == bf16]
    alone, _ = run_rules(profile_of(NW0, device_capability="8.0"), Settings(select=["EXP001"]), CATALOGUE)
    assert [f for f in alone if f.fix.overrides == bf16]  # with PR001 off, the screen is there to measure it
    volta = next(f for f in run_rules(profile_of(NW0), Settings(select=["PR001"]), CATALOGUE)[0])
    assert volta.fix.points() == [{"autocast": "float16"}]  # no TF32, no bf16: one step


@pytest.mark.parametrize("trace", [DEEPSEEK, LAB_AMP, MI300_RESNET_AMP, QWEN_BF16, BERT_H100])
def test_no_precision_advice_for_fp8_and_mixed_precision_runs(trace):
    assert "PR001" not in findings(trace)


# --------------------------------------------------------------------------- on a CPU trace recorded here


@pytest.fixture(scope="module")
def cpu_matmul_trace(tmp_path_factory):
    """A real CPU Kineto trace of a few steps dominated by 1024^3 FP32 matmuls."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    path = tmp_path_factory.mktemp("cpu") / "trace.json"
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=3, repeat=1), on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
        for _ in range(4):
            for _ in range(3):
                a @ b
            prof.step()
    return path


@pytest.mark.parametrize("bf16, fires", [(True, True), (False, False)])
def test_fp32_matmul_on_a_cpu_claims_a_gain_only_with_native_bf16(cpu_matmul_trace, bf16, fires):
    base = Profile.from_trace(cpu_matmul_trace)
    cpu = Profile(steps=base.steps, trace=base.trace, env={"device": "cpu", "bf16_supported": bf16}, meta=base.meta)
    found, _ = run_rules_json(cpu, Settings(select=["PR001"]), CATALOGUE)
    assert bool(found) == fires
    if fires:
        f = found[0]
        assert f["fix"]["overrides"] == {"autocast": "bfloat16"} and f["severity"] in ("medium", "low")
        assert f["evidence"]["fp32_gemm_step_frac"] > 0.5 and f["evidence"]["cpu_bf16"] is True
