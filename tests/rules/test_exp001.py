"""EXP001 untried-fix: cheap fixes that apply to a run though no other rule proposed them.

Fixtures: tests/workloads/starved_io.py (a loop waiting on data) and tensor_pairs.py (a
compute-bound loop), profiled for real. How the screens are run and kept in the in-process arms:
tests/test_inprocess.py; beside PR001's precision ladder: test_pr001.py.
"""

from __future__ import annotations

import dataclasses
import subprocess

import pytest

from advisor.engine import Settings, run_rules
from advisor.experiments.worth import expected_gain
from advisor.profile import Profile
from advisor.rules import helpers as h
from advisor.rules.exp001_untried_fix import check
from conftest import WORKLOADS, advise_cmd


def test_screens_follow_what_the_step_is_waiting_on(tmp_path):
    """A loop that waits on data for over half its step gets no screen of a compute fix alone (the
    loading comes first: the fused step only stacked on its fix, and so a rule's fused step too) and no
    larger batch; a compute-bound loop gets them, each with the gain its
    profile supports: bf16 none where every GEMM is far under 100 MFLOP (the casts cost what a
    tiny matmul saves: last in the budget's order, behind a screen with no evidence either way), the
    fused step 65% of the optimizer's share; compile no estimate."""

    def screened(script: str, *args: str) -> tuple[Profile, float]:
        out = tmp_path / script
        proc = subprocess.run(advise_cmd("profile", "--steps", "8", "--warmup", "2", "--profile-steps", "2",
                                         "--no-experiments", "--out", str(out), str(WORKLOADS / script), *args),
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        profile = Profile.from_run_dir(out)
        steps = profile.steps[~profile.steps["profiled"]]
        wait = float(steps["data_wait_s"].sum() / steps["duration_s"].sum())
        return profile, wait

    def keys(profile: Profile) -> set:
        return {key for f in check(profile) for key in f.fix.overrides}

    starved, wait = screened("starved_io.py", "--item-ms", "4")  # the wait dominates on a loaded machine too
    alone = {key for f in check(starved) if not f.after for key in f.fix.overrides}
    after = {f.after: set(f.fix.overrides) for f in check(starved) if f.after}
    assert wait > 0.5 and not alone & {"autocast", "compile", "optimizer", "torch_threads", "batch_size_scale"}, (wait, alone)
    # stacked on the loading fix once one wins: the fused step (its SGD), bf16 where this CPU computes it
    assert set(after) == {"dataloader"}, after
    assert "optimizer" in after["dataloader"] and after["dataloader"] <= {"optimizer", "autocast"}, after
    # a rule that owns the fused step (CPU002, its bar lowered to this SGD) waits for the loading fix too
    lowered = Settings(options={"single-tensor-optimizer-cpu": {"min_optimizer_frac": 0.0, "min_elements": 0,
                                                                "min_sgd_tensors": 0}})
    findings, _ = run_rules(starved, lowered)
    owner = next(f for f in findings if f.code == "CPU002")
    assert owner.after == "dataloader" and owner.fix.overrides == {"optimizer": {"fused": True}}
    assert not [f for f in findings if f.screen and "optimizer" in f.fix.overrides]
    busy, wait = screened("tensor_pairs.py")
    assert wait < 0.5 and {"compile", "optimizer"} <= keys(busy), (wait, keys(busy))
    native = dataclasses.replace(busy, env={**busy.env.record(), "bf16_supported": True}, memo={})  # as on AMX, whatever CI has
    screens = {next(iter(f.fix.overrides)): f for f in check(native)}
    assert screens["autocast"].estimated_gain_frac == 0.0
    fused = screens["optimizer"].estimated_gain_frac
    assert fused is not None and fused > 0 and fused == pytest.approx(0.65 * h.optimizer_frac(native), abs=1e-3)
    assert screens["compile"].estimated_gain_frac is None
    assert expected_gain(screens["autocast"]) == 0.0 < expected_gain(screens["compile"])
