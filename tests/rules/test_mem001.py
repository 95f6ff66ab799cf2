"""MEM001 memory-headroom: peak memory against the budget; near OOM, fixes; far under, a bigger batch.

Fixtures: the underused V100 MLP run, runs that get no bigger batch (input-bound, inference,
memory unknown), and the ResNet-50 num_workers=4 trace given the probe's memory numbers (near
OOM, optimizer state dominating, a fragmented allocator). The memory experiments (budgets,
ladders, checkpointing measured on real runs): tests/test_memory.py.
"""

from __future__ import annotations

import pytest

from advisor.engine import Settings, run_rules
from advisor.profile import Profile
from conftest import trace_path
from rule_inputs import CATALOGUE, DEEPSEEK, LAB_AMP, LAB_FP32, MLP_V100, NW0, NW4, QWEN_BF16, findings, profile_of

TOTAL = 15637086208  # the V100's memory, as the probe reads it


def test_memory_headroom_on_an_underused_v100():
    f = findings(MLP_V100, "MEM001")["MEM001"]
    assert f["evidence"]["peak_allocated_frac"] == pytest.approx(0.194, abs=0.01)
    assert findings(MLP_V100, "OPT001")["OPT001"]["evidence"]["launches_per_optimizer_step"] == 404  # single-tensor SGD
    assert f["fix"]["overrides"] == {"batch_size_scale": 4} and f["fix"]["applicability"] == "unsafe"


@pytest.mark.parametrize("trace", [LAB_FP32, LAB_AMP, QWEN_BF16, DEEPSEEK, NW0])
def test_no_bigger_batch_for_input_bound_inference_or_unknown_memory(trace):
    assert "MEM001" not in findings(trace, "MEM001")


def test_near_oom_from_the_probe_memory():
    base = profile_of(NW4)  # any GPU training trace: the probe's numbers below decide
    total = TOTAL
    near = Profile(steps=base.steps, trace=base.trace, env=base.env, meta=base.meta,
                   memory={"peak_allocated_bytes": int(0.9 * total), "peak_reserved_bytes": int(0.95 * total),
                           "device_total_bytes": total})
    (f,), _ = run_rules(near, Settings(select=["MEM001"]), CATALOGUE)
    f = f.to_dict()
    assert "out-of-memory" in f["title"] and f["fix"]["kind"] == "manual" and f["fix"]["overrides"] is None


def test_near_oom_with_optimizer_state_dominating_proposes_sharding_over_the_ranks():
    base = Profile.from_trace(trace_path(NW4))
    total = TOTAL
    tensors = {"parameters_bytes": 2 * 2**30, "gradients_bytes": 2 * 2**30, "optimizer_state_bytes": 8 * 2**30}
    near = Profile(steps=base.steps, trace=base.trace, env={**base.env.record(), "world_size": 8}, meta=base.meta,
                   memory={"peak_allocated_bytes": int(0.9 * total), "peak_reserved_bytes": int(0.95 * total),
                           "device_total_bytes": total, "tensors": tensors})
    found, _ = run_rules(near, Settings(select=["MEM001"]), CATALOGUE)
    shard = next(f for f in found if "shard" in f.title)
    assert shard.fix.kind.value == "manual" and "fully_shard" in shard.fix.snippet
    assert "estimate" in shard.summary and shard.evidence["ranks"] == 8
    assert shard.evidence["estimated_zero1_saved_bytes"] == 7 * 2**30  # 8 GiB of state over 8 ranks
    assert shard.evidence["optimizer_state_bytes"] == 8 * 2**30


def test_a_fragmented_allocator_near_oom_gets_expandable_segments_measured_in_fresh_runs(tmp_path):
    """Reserved 1.5x the allocated peak, near the device's capacity: MEM001 proposes expandable
    segments (safe: numerics unchanged); the arms plan no window for it (the allocator reads the
    setting once) and leave it to fresh runs; a script already started with it gets no such finding."""
    from advisor.experiments.rounds import Rounds

    base = Profile.from_trace(trace_path(NW4))
    total = TOTAL

    def near(**env):
        return Profile(steps=base.steps, trace=base.trace, env={**base.env.record(), **env}, meta=base.meta,
                       memory={"peak_allocated_bytes": int(0.6 * total), "peak_reserved_bytes": int(0.95 * total),
                               "device_total_bytes": total, "tensors": {"parameters_bytes": 2**28}})

    found, _ = run_rules(near(), Settings(select=["MEM001"]), CATALOGUE)
    (segments,) = [f for f in found if f.fix.overrides == {"expandable_segments": True}]
    assert segments.fix.applicability.value == "safe" and segments.evidence["reserved_allocated_ratio"] == pytest.approx(1.583, abs=0.01)
    assert "fragmentation" in segments.summary and "PYTORCH_CUDA_ALLOC_CONF" in segments.fix.snippet
    rounds = Rounds(tmp_path)
    assert rounds.start([segments], near()) == [] and [c.overrides for c in rounds.fresh] == [{"expandable_segments": True}]
    assert "first allocation" in rounds.notes[0]
    already, _ = run_rules(near(cuda_alloc_conf="expandable_segments:True"), Settings(select=["MEM001"]), CATALOGUE)
    assert not [f for f in already if f.fix.overrides == {"expandable_segments": True}]
