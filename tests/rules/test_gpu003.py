"""GPU003 host-sync: host-device synchronizations inside the training step, with their call sites.

Fixtures: HTA's event-sync trace, the Qwen H100 trace recorded with Python stacks, and runs whose
syncs come from pageable copies or fall on an idle GPU. Locations carried to the report and the
terminal: tests/test_sources.py.
"""

from __future__ import annotations

import pytest

from rule_inputs import COMM_A100, DEEPSEEK, EVENT_SYNC, GPU_BOUND_V100, NW0, NW4, QWEN_BF16, findings


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
