"""STEP001 tiny-micro-batches: many small micro-batches per optimizer step.

Fixtures: probe-shaped CPU profiles (samples per optimizer step against the DataLoader's batch).
The zoo's planted script (tests/test_rules_zoo.py) runs it end to end.
"""

from __future__ import annotations

import pytest

from advisor.engine import Settings
from rule_inputs import CATALOGUE, probe_profile, run_rules_json


@pytest.mark.parametrize("kw, micro", [
    (dict(samples=32, batch=2), 16),             # 16 micro-batches of 2 per optimizer step
    (dict(samples=2, batch=2, source="dataloader", optimizer_every=8, steps=16), 8),  # probe timed batches
])
def test_tiny_micro_batches(kw, micro):
    (f,), _ = run_rules_json(probe_profile(**kw), Settings(select=["STEP001"]), CATALOGUE)
    assert f["evidence"]["micro_batches_per_step"] == micro and f["evidence"]["micro_batch_size"] == 2
    assert f["fix"]["overrides"]["batch_size_scale"] >= 2 and f["fix"]["applicability"] == "unsafe"


@pytest.mark.parametrize("kw", [dict(samples=32, batch=32), dict(samples=64, batch=16), dict(samples=8, batch=8)])
def test_ordinary_batches_are_not_tiny(kw):
    assert run_rules_json(probe_profile(**kw), Settings(select=["STEP001"]), CATALOGUE)[0] == []
