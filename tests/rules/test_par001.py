"""PAR001 straggler-rank: the rank whose slower work per step the other ranks wait for.

Fixtures: a real two-rank gloo DDP job on CPU (tests/workloads/ddp_straggler.py), launched once
for this file, in which rank 1 sleeps 30 ms more per step (slow) or nothing differs (even). The
NCCL pair without a straggler: test_par002.py. Launched jobs: tests/test_ranks_e2e.py,
tests/test_launchers.py.
"""

from __future__ import annotations

import pytest

from rule_inputs import analyze_case, case_findings, ddp_job


@pytest.fixture(scope="module")
def ddp_traces(tmp_path_factory):
    return ddp_job(tmp_path_factory.mktemp("ddp"), "slow", "even")


@pytest.mark.slow
def test_rank_that_sleeps_30ms_more_is_named_straggler_with_the_wait_it_causes(ddp_traces):
    report = analyze_case(ddp_traces, "slow")
    found = {f["code"]: f for f in report["findings"]}
    straggler = found["PAR001"]["evidence"]
    assert straggler["straggler_rank"] == 1
    assert 0.02 < straggler["extra_s_per_step"] < 0.045  # 30 ms of sleep, give or take a loaded machine
    assert 0.02 < straggler["wait_caused_by_rank_s"]["0"] < 0.045  # rank 0 waits in gloo:all_reduce for it
    assert "Rank 1" in found["PAR001"]["title"] and "rank 0 waits" in found["PAR001"]["summary"]
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    # The wait is the straggler's, not the network's: whatever PAR002 reports (gloo's own all-reduce
    # can pass its 10% on a loaded 2-core machine) leaves the 30 ms wait out.
    exposed = found.get("PAR002", {}).get("evidence", {}).get("exposed_comm_s_per_step", 0.0)
    assert exposed < 0.5 * straggler["wait_caused_s_per_step"], found.get("PAR002")


@pytest.mark.slow
def test_the_same_job_without_the_sleep_has_no_straggler(ddp_traces):
    assert "PAR001" not in case_findings(ddp_traces, "even")
