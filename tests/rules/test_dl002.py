"""DL002 pageable-memcpy: host-to-device copies from pageable memory, each a sync.

Fixtures: the ResNet-50 run recorded with num_workers=4 (pageable input copies), and runs whose
copies are pinned or tiny.
"""

from __future__ import annotations

import pytest

from rule_inputs import COMM_A100, DEEPSEEK, FUSED_ADAM_A100, LAB_AMP, LAB_FP32, NW4, findings


def test_pageable_input_copies_are_flagged():
    f = findings(NW4, "DL002")["DL002"]
    assert f["evidence"]["pageable_htod_bytes_per_step"] == 19267840 and f["evidence"]["syncs_forced_per_step"] == 2
    assert f["fix"]["overrides"] == {"dataloader": {"pin_memory": True}} and "non_blocking=True" in f["fix"]["snippet"]


@pytest.mark.parametrize("trace", [LAB_FP32, LAB_AMP, DEEPSEEK, COMM_A100, FUSED_ADAM_A100])
def test_pinned_or_tiny_copies_are_not_flagged(trace):
    assert "DL002" not in findings(trace, "DL002")
