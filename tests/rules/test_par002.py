"""PAR002 exposed-communication: the collective communication no compute hides in each step.

Fixtures: ranks 0 and 1 of a 128-rank NCCL job (HTA's sampled pair) read as one job, and rank 0
of a 16-rank TorchRec job alone. `advise analyze` of a folder of rank traces: tests/test_ranks.py.
"""

from __future__ import annotations

import pytest

from advisor.profile import Profile
from conftest import trace_path
from rule_inputs import COMM_A100, by_code, pair


def test_nccl_pair_has_exposed_communication_and_no_straggler():
    found = by_code(pair())
    assert "PAR001" not in found  # the ranks' own work differs by ~3%: no straggler
    assert "PAR004" not in found  # FLOPs per step differ by ~4%
    exposed = found["PAR002"]["evidence"]
    assert exposed["n_ranks"] == 2 and exposed["ddp"] is True
    assert 0.15 < exposed["exposed_comm_frac"] < 0.35
    assert set(exposed["comm_comp_overlap_by_rank"]) == {"0", "1"}
    assert all(0.0 < v < 0.5 for v in exposed["comm_comp_overlap_by_rank"].values())
    assert "gradient_as_bucket_view=True" in found["PAR002"]["fix"]["snippet"]
    assert found["PAR002"]["fix"]["kind"] == "manual"


def test_overlap_agrees_with_holistic_trace_analysis():
    """HTA 0.5.0's get_comm_comp_overlap on these two files (benchmarks/cross_rank_vs_hta.py): 0.149 and 0.199."""
    overlap = by_code(pair())["PAR002"]["evidence"]["comm_comp_overlap_by_rank"]
    assert overlap["0"] == pytest.approx(0.149, abs=0.002) and overlap["1"] == pytest.approx(0.199, abs=0.002)


def test_one_rank_alone_gets_no_cross_rank_findings_but_is_told_its_exposure():
    one = Profile.from_trace(trace_path(COMM_A100))
    found = by_code(one)
    assert "PAR001" not in found and "PAR004" not in found
    assert "With one rank's trace" in found["PAR002"]["summary"]
