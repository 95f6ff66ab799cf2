"""GPU rules on real GPU traces: each rule fires where it should and nowhere else.

Traces are found by conftest.trace_path: tests/data/traces (shipped, licensed) first, then the
shared traces folder (the rest; those tests skip loudly without it, and CI fails).

Expected answers come from the traces' README (kineto tb_plugin's own expected output for the
ResNet-50 pair: a DataLoader flag on num_workers=0 only, an AMP hint on both with 68% of
kernel time in tensor-core-eligible ops) and from what each file is known to contain.
"""

from __future__ import annotations

from functools import lru_cache

import pytest

from advisor.engine import Settings, run_rules
from advisor.profile import Profile
from advisor.rules.registry import load_rules
from conftest import trace_path

CATALOGUE = load_rules()

NW0 = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
NW0_B = "kineto/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz"
NW4 = "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"
NW4_B = "kineto/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz"
LAB_FP32 = "ml-accelerator-profiling-labs/fp32.pt.trace.json"
LAB_AMP = "ml-accelerator-profiling-labs/amp.pt.trace.json"
DEEPSEEK = "deepseek-profile-data/train.json"
MI300_RESNET_AMP = "tracelens/mi300/resnet_act_checkpoint.json.gz"
QWEN_BF16 = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
BERT_H100 = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
GPU_BOUND_V100 = "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
LOW_UTIL_A100 = "hta/nccl_parser_config/nccl_data.json.gz"
COMM_A100 = "hta/negative_queue_length_values_check/rank0.json.gz"
FUSED_ADAM_A100 = "hta/trace_diff/control/control.json.gz"
MLP_V100 = "hta/df_index_resolver/df_index_resolver.json.gz"
EVENT_SYNC = "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz"
TRITON_A100 = "hta/triton_example/triton_example.json.gz"
MI250_TOY = "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
COMPILE_LADDER = [{"compile": "reduce-overhead"}, {"compile": "max-autotune-no-cudagraphs"}]


@lru_cache(maxsize=None)
def _profile(relative: str) -> Profile:
    return Profile.from_trace(trace_path(relative))


def profile_of(relative: str, **env) -> Profile:
    """The trace's Profile, optionally as if the probe had recorded `env` (flags, capability)."""
    base = _profile(relative)
    if not env:
        return base
    return Profile(steps=base.steps, trace=base.trace, env={**base.env, **env}, meta=base.meta)


def findings(relative: str, select: str = "ALL", options: dict | None = None, **env) -> dict[str, dict]:
    found, warnings = run_rules(profile_of(relative, **env), Settings(select=[select], options=options or {}), CATALOGUE)
    assert warnings == []
    found = [f.to_dict() for f in found]  # as report.json has them
    codes = [f["code"] for f in found]
    assert len(codes) == len(set(codes))
    return {f["code"]: f for f in found}


# --------------------------------------------------------------------------- DL001 dataloader-starvation


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


# --------------------------------------------------------------------------- PR001 fp32-matmul


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


# --------------------------------------------------------------------------- DL002 pageable-memcpy


def test_pageable_input_copies_are_flagged():
    f = findings(NW4, "DL002")["DL002"]
    assert f["evidence"]["pageable_htod_bytes_per_step"] == 19267840 and f["evidence"]["syncs_forced_per_step"] == 2
    assert f["fix"]["overrides"] == {"dataloader": {"pin_memory": True}} and "non_blocking=True" in f["fix"]["snippet"]


@pytest.mark.parametrize("trace", [LAB_FP32, LAB_AMP, DEEPSEEK, COMM_A100, FUSED_ADAM_A100])
def test_pinned_or_tiny_copies_are_not_flagged(trace):
    assert "DL002" not in findings(trace, "DL002")


# --------------------------------------------------------------------------- GPU001 idle-gpu


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


# --------------------------------------------------------------------------- GPU002 launch-bound


@pytest.mark.parametrize("trace", [BERT_H100, LOW_UTIL_A100])
def test_short_kernels_on_an_idle_gpu_are_launch_bound(trace):
    f = findings(trace, "GPU002")["GPU002"]
    assert f["evidence"]["gpu_busy_frac_outside_data_wait"] < 0.3
    assert f["fix"]["overrides"] == {"compile": True} and f["fix"]["applicability"] == "unsafe"
    assert f["fix"]["ladder"] == COMPILE_LADDER  # measured with the default as one sweep


@pytest.mark.parametrize("trace", [DEEPSEEK, GPU_BOUND_V100, NW4, LAB_AMP, MI300_RESNET_AMP])
def test_gpu_bound_or_input_bound_runs_are_not_launch_bound(trace):
    assert "GPU002" not in findings(trace, "GPU002")


# --------------------------------------------------------------------------- GPU003 host-sync


def test_host_syncs_are_found_with_their_cause():
    f = findings(EVENT_SYNC, "GPU003")["GPU003"]
    assert [site["cause"] for site in f["evidence"]["call_sites"]] == ["event.synchronize()"]
    assert f["evidence"]["syncs_per_step"] == 1  # its .item() and device sync found the GPU idle: free
    assert f["fix"]["kind"] == "manual" and f["fix"]["applicability"] == "display-only"


def test_python_call_sites_are_named_when_the_trace_has_stacks():
    """QWEN_BF16 was recorded with_stack: its sync is named by the user's Python frame that made it,
    not by torch's internals or the aten op."""
    f = findings(QWEN_BF16, "GPU003", options={"host-sync": {"min_idle_frac": 0.0}})["GPU003"]
    sites = f["evidence"]["call_sites"]
    assert [s["call_site"] for s in sites] == ["moca/library/profiling/profile.py(34): run_torch_profiler"]
    assert sites[0]["cause"] == "explicit torch.cuda.synchronize()"


@pytest.mark.parametrize("trace", [NW0, NW4, COMM_A100, DEEPSEEK, GPU_BOUND_V100])
def test_syncs_from_pageable_copies_or_on_an_idle_gpu_are_not_host_sync(trace):
    assert "GPU003" not in findings(trace, "GPU003")


# --------------------------------------------------------------------------- GPU004 cudnn-benchmark


def test_cudnn_benchmark_off_with_fixed_conv_shapes():
    f = findings(NW0, "GPU004", cudnn_benchmark=False)["GPU004"]
    assert f["evidence"]["conv_kernel_frac"] > 0.5 and f["fix"]["overrides"] == {"cudnn_benchmark": True}


def test_cudnn_benchmark_needs_the_flag_from_the_probe():
    assert findings(NW0, "GPU004") == {}  # a trace does not say how the flag was set
    assert findings(NW0, "GPU004", cudnn_benchmark=True) == {}
    assert findings(FUSED_ADAM_A100, "GPU004", cudnn_benchmark=False) == {}  # no convolutions


# --------------------------------------------------------------------------- MEM001 memory-headroom


def test_memory_headroom_on_an_underused_v100():
    f = findings(MLP_V100, "MEM001")["MEM001"]
    assert f["evidence"]["peak_allocated_frac"] == pytest.approx(0.194, abs=0.01)
    assert findings(MLP_V100, "OPT001")["OPT001"]["evidence"]["launches_per_optimizer_step"] == 404  # single-tensor SGD
    assert f["fix"]["overrides"] == {"batch_size_scale": 4} and f["fix"]["applicability"] == "unsafe"


@pytest.mark.parametrize("trace", [LAB_FP32, LAB_AMP, QWEN_BF16, DEEPSEEK, NW0])
def test_no_bigger_batch_for_input_bound_inference_or_unknown_memory(trace):
    assert "MEM001" not in findings(trace, "MEM001")


def test_near_oom_from_the_probe_memory():
    base = _profile(NW4)  # any GPU training trace: the probe's numbers below decide
    total = 15637086208
    near = Profile(steps=base.steps, trace=base.trace, env=base.env, meta=base.meta,
                   memory={"peak_allocated_bytes": int(0.9 * total), "peak_reserved_bytes": int(0.95 * total),
                           "device_total_bytes": total})
    (f,), _ = run_rules(near, Settings(select=["MEM001"]), CATALOGUE)
    f = f.to_dict()
    assert "out-of-memory" in f["title"] and f["fix"]["kind"] == "manual" and f["fix"]["overrides"] is None


# --------------------------------------------------------------------------- OPT001 unfused-optimizer


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
    base = _profile(FUSED_ADAM_A100)
    prof = Profile(steps=base.steps, trace=base.trace, env=base.env, meta=base.meta, observed={"optimizers": [probe]})
    (f,), _ = run_rules(prof, Settings(select=["OPT001"]), CATALOGUE)
    f = f.to_dict()
    assert f["evidence"]["implementation"] == "single-tensor" and f["fix"]["overrides"] == {"optimizer": {"fused": True}}


# --------------------------------------------------------------------------- PR002 channels-first-conv


def test_amp_convnet_in_nchw_pays_for_transposes():
    f = findings(MI300_RESNET_AMP, "PR002")["PR002"]
    assert f["evidence"]["transpose_step_frac"] > 0.05 and f["fix"]["overrides"] == {"channels_last": True}


@pytest.mark.parametrize("trace", [LOW_UTIL_A100, NW0, DEEPSEEK])
def test_fp32_convnets_are_not_asked_for_channels_last(trace):
    assert "PR002" not in findings(trace, "PR002")
