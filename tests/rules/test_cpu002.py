"""CPU002 single-tensor-optimizer-cpu: a CPU optimizer that updates one tensor at a time.

Fixtures: the copy of pytorch/examples' word_language_model in tests/workloads/word_lm, profiled
for real with AdamW. The zoo's planted script (tests/test_rules_zoo.py) runs it end to end.
"""

from __future__ import annotations

import pytest

from rule_inputs import WORD_LM, codes, profile_script


@pytest.mark.slow
def test_word_language_model_with_adamw_gets_a_fused_optimizer(tmp_path):
    # Small batches (4 sequences of 10 tokens): AdamW's single-tensor update over the 4.6M
    # parameters (embedding and decoder of a 10k vocabulary) outweighs the decoder's matmul.
    report = profile_script(tmp_path, *WORD_LM, "--use-optimizer", "--lr", "1e-3", "--batch_size", "4", "--bptt", "10")
    found = codes(report)
    assert "CPU002" in found, report["breakdown"]
    f = found["CPU002"]
    assert f["fix"]["overrides"] == {"optimizer": {"fused": True}}
    assert f["evidence"]["optimizer"] == "AdamW" and f["evidence"]["foreach"] is None
    assert f["evidence"]["n_elements"] > 4_000_000 and f["evidence"]["optimizer_frac"] >= 0.1
    assert not {"CPU001", "OPT002"} & set(found)  # one fused LSTM op a layer; model.zero_grad() drops grads
