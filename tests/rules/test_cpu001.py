"""CPU001 op-overhead-bound: CPU training steps that are mostly framework overhead.

Fixtures: the copy of nanoGPT in tests/workloads/nanogpt (its README's CPU settings), profiled
for real; the zoo's planted script and that nanoGPT recorded on a slower CPU (tests/data/runs). The
zoo (tests/test_rules_zoo.py) runs the planted script end to end on this machine.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from advisor.profile import Profile
from advisor.rules import cpu001_op_overhead_bound as cpu001
from conftest import WORKLOADS
from rule_inputs import codes, profile_script

RUNS = Path(__file__).parent.parent / "data" / "runs"


def test_composite_ops_are_charged_for_the_ops_they_dispatch():
    # Recorded on an AMD EPYC without AVX-512: 48 LayerNorm/Linear/GELU blocks on 8x16 tensors,
    # 726 top-level ops a step and 4,443 with those they dispatch, in an 18.7 ms step of almost no
    # arithmetic. Charged per top-level op only, it read 19% overhead and the plant went unseen there.
    plant = Profile.from_run_dir(RUNS / "cpu_many_small_ops_on_an_epyc")
    [finding] = cpu001.check(plant)
    ev = finding.evidence
    assert ev["ops_per_step"] == 726 and ev["dispatched_ops_per_step"] > 4000
    assert 0.3 <= ev["overhead_frac"] < 0.6, ev
    assert ev["overhead_frac"] * ev["fastest_step_us"] < 1.0 * ev["dispatched_ops_per_step"] + 5 * ev["ops_per_step"]
    assert not list(cpu001.check(plant, nested_op_cost_us=0.0))  # the top-level charge alone misses it

    # The same machine's nanoGPT (README CPU settings): as many top-level ops, but matmuls carry the step.
    [nanogpt] = cpu001.check(Profile.from_run_dir(RUNS / "nanogpt_on_an_epyc"), min_overhead_frac=0.0)
    assert nanogpt.evidence["ops_per_step"] > 600 and nanogpt.evidence["overhead_frac"] < 0.1


def test_steps_of_unequal_batches_are_compared_per_sample(tmp_path):
    # Episodes of unequal length (a reinforcement-learning script's 12 to 91 samples a step): the same
    # recorded plant with its unprofiled steps made episodes of a quarter of the samples and a quarter
    # of the time. Set against the fastest step whole, the profiled steps' overhead read 4x its share
    # (capped at 100%: pytorch/examples' REINFORCE read so); per sample it reads what the plant reads.
    run = shutil.copytree(RUNS / "cpu_many_small_ops_on_an_epyc", tmp_path / "episodes")
    steps = pd.read_csv(run / "steps.csv")
    short = ~steps["profiled"]
    assert short.sum() >= 2 and (steps["samples"] == 8).all()
    for column in ("duration_s", "host_s", "cpu_s", "data_wait_s"):
        steps.loc[short, column] /= 4
    steps.loc[short, "samples"] = 2
    steps.to_csv(run / "steps.csv", index=False)
    [plant] = cpu001.check(Profile.from_run_dir(RUNS / "cpu_many_small_ops_on_an_epyc"))
    [episodes] = cpu001.check(Profile.from_run_dir(run))
    assert episodes.evidence["overhead_frac"] == pytest.approx(plant.evidence["overhead_frac"], rel=0.01)
    assert episodes.evidence["per_sample_at_batch"] == 8 and "per_sample_at_batch" not in plant.evidence


@pytest.mark.slow
def test_nanogpt_on_cpu_is_matmul_bound_not_overhead_bound(tmp_path):
    # The README's CPU settings: ~700 ops a step, but 4 layers of 128-wide matmuls on 12x64 tokens
    # carry the step; AdamW's single-tensor update is a few % of it. No CPU finding to make.
    report = profile_script(tmp_path, str(WORKLOADS / "nanogpt" / "train_char_cpu.py"), "--eval_iters=2")
    assert not {"CPU001", "CPU002", "CPU003", "OPT002"} & set(codes(report))
    assert report["observed"]["optimizers"][0]["class"] == "AdamW"
