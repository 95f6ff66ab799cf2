"""PAR004 rank-load-imbalance: ranks of one job given more work per step than others.

Fixtures: a real two-rank gloo DDP job on CPU (tests/workloads/ddp_straggler.py), launched once
for this file, in which rank 1 gets 4x the batch (uneven). The NCCL pair, whose FLOPs per step
differ by ~4% (no imbalance): test_par002.py.
"""

from __future__ import annotations

import pytest

from rule_inputs import case_findings, ddp_job


@pytest.fixture(scope="module")
def ddp_traces(tmp_path_factory):
    return ddp_job(tmp_path_factory.mktemp("ddp"), "uneven")


@pytest.mark.slow
def test_a_rank_with_four_times_the_batch_is_load_imbalance(ddp_traces):
    imbalance = case_findings(ddp_traces, "uneven")["PAR004"]["evidence"]
    assert imbalance["heaviest_rank"] == 1 and imbalance["measure"] == "flops"
    assert 2.9 < imbalance["imbalance"] < 3.1  # 128 against 32 samples: 4x the FLOPs
