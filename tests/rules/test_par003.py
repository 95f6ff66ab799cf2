"""PAR003 data-parallel: torch.nn.DataParallel driving several GPUs from one process.

Fixtures: DistributedDataParallel traces (one GPU per process: not DataParallel), and the
ResNet-50 num_workers=0 trace with every other kernel moved to GPU 1, as DataParallel's replicas
would run.
"""

from __future__ import annotations

import pytest

from advisor.profile import Profile
from conftest import trace_path
from rule_inputs import COMM_A100, GPU_BOUND_V100, LOW_UTIL_A100, MI300_RESNET_AMP, NW0, PAIR, by_code

DDP_TRACES = [*PAIR, COMM_A100, LOW_UTIL_A100, GPU_BOUND_V100, MI300_RESNET_AMP]


@pytest.mark.parametrize("relative", DDP_TRACES)
def test_data_parallel_is_not_flagged_on_distributed_data_parallel_traces(relative):
    """One GPU per process, `DistributedDataParallel.forward` in every one: not nn.DataParallel."""
    profile = Profile.from_trace(trace_path(relative))
    assert profile.annotations["name"].str.contains("DistributedDataParallel").any()
    assert "PAR003" not in by_code(profile, "PAR003")


def test_data_parallel_is_flagged_when_one_process_drives_two_gpus():
    """No two-GPU DataParallel trace exists in the shared set (nor a second GPU here): a real
    one-GPU ResNet-50 trace with every other kernel moved to GPU 1, as DataParallel's replicas
    would run, and no process group. The same move on a DDP rank's trace (NCCL kernels) is not
    DataParallel's signature."""
    profile = Profile.from_trace(trace_path(NW0))
    profile.kernels.loc[profile.kernels.index[1::2], "device"] = 1
    found = by_code(profile, "PAR003")["PAR003"]
    assert found["evidence"]["devices"] == [0, 1] and not found["evidence"]["module_seen"]
    assert found["fix"]["kind"] == "manual" and "DistributedDataParallel" in found["fix"]["snippet"]
    ddp = Profile.from_trace(trace_path(COMM_A100))
    ddp.kernels.loc[ddp.kernels.index[1::2], "device"] = 1
    assert "PAR003" not in by_code(ddp, "PAR003")
