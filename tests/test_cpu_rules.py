"""CPU advice on real scripts: the copies of nanoGPT and pytorch/examples' word_language_model,
and the zero_grad override's took-effect check (fresh child and in-process arm).

The zoo (tests/test_rules_zoo.py) runs the planted CPU001/CPU002/CPU003/OPT002 scripts and the
healthy controls; here each rule is also held quiet on the real scripts where it has nothing
to say, and the new override is shown to change what the script's own zero_grad call does.
"""

from __future__ import annotations

import json
import subprocess

import pandas as pd
import pytest

from advisor.run_dir.atomic import write_json_atomic
from advisor.overrides import not_applied
from advisor.probe.runner import ProbeConfig, run_probe
from advisor.profile import Profile
from advisor.rules import cpu003_cpu_thread_settings
from conftest import WORKLOADS, advise_cmd

pytestmark = pytest.mark.slow

PROBE = ["--steps", "6", "--warmup", "2", "--profile-steps", "2", "--no-experiments", "--json"]
WORD_LM = [str(WORKLOADS / "word_lm" / "main.py"), "--vocab", "10000", "--tokens", "60000"]


def profile(tmp_path, *script: str) -> dict:
    proc = subprocess.run(advise_cmd("profile", *PROBE, "--out", str(tmp_path / "run"), *script),
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["status"] == "ok", report["error"]
    assert not [w for w in report["warnings"] if w.startswith("rule ")], report["warnings"]
    return report


def codes(report: dict) -> dict:
    return {f["code"]: f for f in report["findings"]}


def test_word_language_model_with_adamw_gets_a_fused_optimizer(tmp_path):
    # Small batches (4 sequences of 10 tokens): AdamW's single-tensor update over the 4.6M
    # parameters (embedding and decoder of a 10k vocabulary) outweighs the decoder's matmul.
    report = profile(tmp_path, *WORD_LM, "--use-optimizer", "--lr", "1e-3", "--batch_size", "4", "--bptt", "10")
    found = codes(report)
    assert "CPU002" in found, report["breakdown"]
    f = found["CPU002"]
    assert f["fix"]["overrides"] == {"optimizer": {"fused": True}}
    assert f["evidence"]["optimizer"] == "AdamW" and f["evidence"]["foreach"] is None
    assert f["evidence"]["n_elements"] > 4_000_000 and f["evidence"]["optimizer_frac"] >= 0.1
    assert not {"CPU001", "OPT002"} & set(found)  # one fused LSTM op a layer; model.zero_grad() drops grads


def test_word_language_model_manual_sgd_has_no_optimizer_or_zeroing_finding(tmp_path):
    report = profile(tmp_path, *WORD_LM)
    assert report["step_source"] == "backward"
    assert not {"CPU001", "CPU002", "CPU003", "OPT002"} & set(codes(report))
    zero_grad = json.loads((tmp_path / "run" / "probe.json").read_text())["observed"]["zero_grad"]
    assert zero_grad["Module"]["calls"] >= 6 and zero_grad["Module"]["kept"] == 0


def test_nanogpt_on_cpu_is_matmul_bound_not_overhead_bound(tmp_path):
    # The README's CPU settings: ~700 ops a step, but 4 layers of 128-wide matmuls on 12x64 tokens
    # carry the step; AdamW's single-tensor update is a few % of it. No CPU finding to make.
    report = profile(tmp_path, str(WORKLOADS / "nanogpt" / "train_char_cpu.py"), "--eval_iters=2")
    assert not {"CPU001", "CPU002", "CPU003", "OPT002"} & set(codes(report))
    assert report["observed"]["optimizers"][0]["class"] == "AdamW"


def test_zero_grad_override_takes_effect_in_a_fresh_child(tmp_path):
    run = run_probe(ProbeConfig(script=str(WORKLOADS / "zoo" / "zero_grad_keeps_grads.py"), out=tmp_path / "run",
                                warmup=1, steps=3, profile_steps=0, overrides={"zero_grad_set_to_none": True}))
    assert run.status == "ok"
    applied = run.probe.applied
    assert applied["zero_grad_set_to_none"] >= 4  # every zero_grad of the run was switched
    assert not_applied({"zero_grad_set_to_none": True}, applied) == []
    # the hooks still see what the script asked for
    assert run.probe.observed["zero_grad"]["Optimizer"]["kept"] == run.probe.observed["zero_grad"]["Optimizer"]["calls"]


def test_zero_grad_override_is_not_applied_where_grads_are_already_dropped(tmp_path):
    run = run_probe(ProbeConfig(script=str(WORKLOADS / "zoo" / "healthy_inmemory_mlp.py"), out=tmp_path / "run",
                                warmup=1, steps=3, profile_steps=0, overrides={"zero_grad_set_to_none": True}))
    assert run.status == "ok"
    assert "zero_grad_set_to_none" not in run.probe.applied
    assert not_applied({"zero_grad_set_to_none": True}, run.probe.applied) == ["zero_grad_set_to_none"]


def test_zero_grad_switch_in_process_only_inside_its_window(tmp_path):
    out = tmp_path / "run"
    plan = [{"arm": "base", "overrides": {}, "warmup": 1, "steps": 2},
            {"arm": "none", "overrides": {"zero_grad_set_to_none": True}, "warmup": 1, "steps": 2},
            {"arm": "base", "overrides": {}, "warmup": 1, "steps": 2}]
    sent = []

    def on_window_done(round_no: int, suffixes: list[str], lines) -> None:
        write_json_atomic(out / "plan.json", {"round": round_no, "windows": [] if sent else plan})
        sent.append(round_no)

    run = run_probe(ProbeConfig(script=str(WORKLOADS / "zoo" / "zero_grad_keeps_grads.py"), out=out, warmup=1, steps=3,
                                profile_steps=0, arms=True, plan_timeout_s=20, timeout_s=60, arms_budget_s=120),
                    on_window_done=on_window_done)
    windows = run.arms.arm_windows
    assert [w.arm for w in windows] == ["base", "none", "base"]
    assert [w.applied.get("zero_grad_set_to_none", 0) for w in windows] == [0, 3, 0]  # 1 warm-up + 2 steps
    assert all(w.error is None and not w.not_switchable for w in windows)


@pytest.mark.timing  # the zeroing loop's share of the step is measured: it ran alone in CI's 2-core box
def test_a_hand_written_grad_zeroing_loop_gets_a_manual_fix(tmp_path):
    report = profile(tmp_path, str(WORKLOADS / "manual_grad_zero.py"))
    f = codes(report)["OPT002"]
    assert f["fix"]["kind"] == "manual" and "p.grad = None" in f["fix"]["snippet"]
    assert f["evidence"]["zeroed_per_step"] >= 13 and f["evidence"]["zeroed_elements"] > 6_000_000
    assert "zero_grad_calls" not in f["evidence"]


def test_a_trace_alone_shows_optimizer_zero_grad_keeping_grads(tmp_path):
    run_probe(ProbeConfig(script=str(WORKLOADS / "zoo" / "zero_grad_keeps_grads.py"), out=tmp_path / "run",
                          warmup=1, steps=4, profile_steps=2))
    proc = subprocess.run(advise_cmd("analyze", "--json", "--out", str(tmp_path / "a"), str(tmp_path / "run" / "trace.json.gz")),
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    f = codes(json.loads(proc.stdout))["OPT002"]
    assert f["fix"]["overrides"] == {"zero_grad_set_to_none": True}
    assert f["evidence"]["zeroed_per_step"] == 8  # 4 weights and 4 biases, in one _foreach_zero_


# CPU003's decision on probe-shaped profiles (the real scripts above and the zoo's cpu_one_thread
# plant run it end to end): threads against physical cores and the workers' share.
def _cpu_profile(*, threads, physical, logical, workers=0, wait=0.001, cpu_percent=100.0, ranks=None):
    steps = pd.DataFrame({"index": range(6), "t_start": [float(i) for i in range(6)], "t_end": [i + 0.9 for i in range(6)],
                          "duration_s": [0.05] * 6, "data_wait_s": [wait] * 6, "optimizer_s": [0.002] * 6,
                          "samples": [32] * 6, "profiled": [False] * 6})
    samples = pd.DataFrame({"t": [i * 0.5 for i in range(12)], "cpu_percent": [cpu_percent] * 12,
                            "sys_cpu_percent": [cpu_percent / logical] * 12})
    return Profile(steps=steps, samples=samples,
                   env={"device": "cpu", "cpu_count": logical, "physical_cores": physical, "torch_threads": threads,
                        "local_world_size": ranks},
                   observed={"dataloaders": [{"num_workers": workers, "batch_size": 32}]},
                   meta={"source": "probe", "step_source": "optimizer"})


@pytest.mark.parametrize("kw, threads", [
    (dict(threads=1, physical=8, logical=16), 8),             # cores idle: all of them
    (dict(threads=2, physical=8, logical=16, workers=2), 6),  # the workers keep two
    (dict(threads=16, physical=8, logical=16), 8),            # past the physical cores, onto SMT siblings
    (dict(threads=8, physical=8, logical=16), None),          # matched
    (dict(threads=6, physical=8, logical=8, workers=2), None),  # matched, beside the workers
    (dict(threads=8, physical=8, logical=8, workers=2), None),  # over only with the workers: cpu-oversubscription's
    (dict(threads=1, physical=8, logical=16, wait=0.04), None),  # waiting on data, not computing
    (dict(threads=1, physical=2, logical=2, ranks=2), None),  # two ranks on two cores: one each, matched
    (dict(threads=1, physical=8, logical=16, ranks=2), 4),    # two ranks on eight cores: four each
])
def test_cpu_thread_settings(kw, threads):
    found = list(cpu003_cpu_thread_settings.check(_cpu_profile(**kw)))
    assert [f.fix.overrides for f in found] == ([{"torch_threads": threads}] if threads else [])
