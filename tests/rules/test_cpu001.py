"""CPU001 op-overhead-bound: CPU training steps that are mostly framework overhead.

Fixtures: the copy of nanoGPT in tests/workloads/nanogpt (its README's CPU settings), profiled
for real. The zoo's planted script (tests/test_rules_zoo.py) runs it end to end where it fires.
"""

from __future__ import annotations

import pytest

from conftest import WORKLOADS
from rule_inputs import codes, profile_script


@pytest.mark.slow
def test_nanogpt_on_cpu_is_matmul_bound_not_overhead_bound(tmp_path):
    # The README's CPU settings: ~700 ops a step, but 4 layers of 128-wide matmuls on 12x64 tokens
    # carry the step; AdamW's single-tensor update is a few % of it. No CPU finding to make.
    report = profile_script(tmp_path, str(WORKLOADS / "nanogpt" / "train_char_cpu.py"), "--eval_iters=2")
    assert not {"CPU001", "CPU002", "CPU003", "OPT002"} & set(codes(report))
    assert report["observed"]["optimizers"][0]["class"] == "AdamW"
