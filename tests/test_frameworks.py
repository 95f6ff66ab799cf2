"""Fixes in the words of the user's framework: a Hugging Face Trainer job is told `bf16=True` in its
TrainingArguments, a Lightning job `precision="bf16-mixed"` in its L.Trainer, each at the user's own
line that configures it; a job that already has the setting is not told it again."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from advisor.framework import words as framework_words
from conftest import WORKLOADS, advise_cmd

FRAMEWORKS = WORKLOADS / "frameworks"
QUICK = ("--steps", "8", "--warmup", "3", "--profile-steps", "3", "--no-experiments", "--select", "PR001")


def _pr001(report: dict) -> dict | None:
    """The run's PR001, which a CPU proposes only with native bf16 (as test_rules_zoo reads it): on a
    CPU without it (an AMD EPYC without AVX-512), none, and no words to check (None)."""
    found = [f for f in report["findings"] if f["code"] == "PR001"]
    if not report["env"].get("bf16_supported"):
        assert not found, "a CPU without native bf16 was told to use bf16"
        return None
    assert len(found) == 1, [f["code"] for f in report["findings"]]
    return found[0]


def _quick(tmp_path, script, *script_args: str, out: str = "run") -> dict:
    """A quick run of `script` with PR001 alone, no experiments: its report. These tests are about the
    words, not the rule's bar: any FP32 matmul share is reported (a busy neighbour test once pushed a
    56% share under PR001's 30%), and one intra-op thread keeps the run off its neighbour's core."""
    config = tmp_path / "advise.toml"
    config.write_text("[fp32-matmul]\nmin-cpu-step-frac = 0.05\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(advise_cmd("profile", *QUICK, "--config", str(config), "--out", out, str(script), *script_args),
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {**json.loads((tmp_path / out / "report.json").read_text()), "stdout": proc.stdout}


def _line_of(path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_each_framework_has_its_own_words_for_a_fix():
    hf = {"name": framework_words.HF_TRAINER, "settings": {"per_device_train_batch_size": 16, "gradient_accumulation_steps": 1}}
    lit = {"name": framework_words.LIGHTNING, "settings": {"accumulate_grad_batches": 1}}
    assert framework_words.snippet("autocast", "bfloat16", hf).endswith("TrainingArguments(..., bf16=True)")
    assert framework_words.snippet("autocast", "float16", hf).endswith("fp16=True)")
    assert "dataloader_num_workers=4, dataloader_persistent_workers=True" in framework_words.snippet(
        "dataloader", {"num_workers": 4, "persistent_workers": True}, hf)
    assert framework_words.snippet("compile", True, hf).endswith("torch_compile=True)")
    assert framework_words.snippet("optimizer", {"fused": True}, hf).endswith('optim="adamw_torch_fused")')
    assert framework_words.snippet("activation_checkpointing", True, hf).endswith("gradient_checkpointing=True)")
    assert framework_words.snippet("float32_matmul_precision", "high", hf).endswith("tf32=True)")
    assert framework_words.snippet("batch_size_scale", 2, hf).endswith("per_device_train_batch_size=32)")
    assert framework_words.snippet("batch_size_scale", 0.5, hf).endswith(
        "per_device_train_batch_size=8, gradient_accumulation_steps=2)")
    flags = {**hf, "command_line": True, "configured_at": {"file": "/x/run_clm.py", "line": 3}}
    assert framework_words.snippet("autocast", "bfloat16", flags) == "+ python run_clm.py ... --bf16"
    assert framework_words.snippet("dataloader", {"num_workers": 4, "persistent_workers": True}, flags) == (
        "+ python run_clm.py ... --dataloader_num_workers 4 --dataloader_persistent_workers")
    assert framework_words.snippet("optimizer", {"fused": True}, flags) == "+ python run_clm.py ... --optim adamw_torch_fused"
    assert framework_words.snippet("batch_size_scale", 0.5, flags) == (
        "+ python run_clm.py ... --per_device_train_batch_size 8 --gradient_accumulation_steps 2")
    assert framework_words.snippet("autocast", "bfloat16", lit).endswith('L.Trainer(..., precision="bf16-mixed")')
    assert "configure_optimizers" in framework_words.snippet("optimizer", {"fused": True}, lit)
    assert framework_words.snippet("batch_size_scale", 0.5, lit).endswith("accumulate_grad_batches=2)")
    # the user's own line, where it is the whole call: the change pastes as it stands
    fab = {"name": framework_words.FABRIC, "settings": {"precision": "32-true"},
           "configured_at": {"file": "/x/train.py", "line": 12, "code": "fabric = L.Fabric()"}}
    assert framework_words.snippet("autocast", "bfloat16", fab) == '- fabric = L.Fabric()\n+ fabric = L.Fabric(precision="bf16-mixed")'
    one_line = {**lit, "configured_at": {"code": "trainer = L.Trainer(gradient_clip_val=0.25, max_epochs=20)"}}
    assert framework_words.snippet("autocast", "bfloat16", one_line).endswith(
        '+ trainer = L.Trainer(gradient_clip_val=0.25, max_epochs=20, precision="bf16-mixed")')
    odd = {**lit, "configured_at": {"code": 'trainer = L.Trainer(default_root_dir="a, b)")  # runs'}}
    assert framework_words.snippet("autocast", "bfloat16", odd).endswith(
        '+ trainer = L.Trainer(default_root_dir="a, b)", precision="bf16-mixed")  # runs')
    # a call over several lines, one that already passes the setting (or may, through **): the generic form
    for code in ("trainer = L.Trainer(", 'trainer = L.Trainer(precision="32-true")', "trainer = L.Trainer(**cfg)"):
        assert framework_words.snippet("autocast", "bfloat16", {**lit, "configured_at": {"code": code}}).endswith(
            'L.Trainer(..., precision="bf16-mixed")')
    # a knob the framework has no setting for keeps the plain form; no framework: the plain form
    assert framework_words.snippet("torch_threads", 2, hf) == framework_words.snippet("torch_threads", 2) == "+ torch.set_num_threads(2)"
    assert "torch.autocast" in framework_words.snippet("autocast", "bfloat16")


def test_the_rule_docs_show_every_frameworks_form(advise):
    r = advise("rules", "PR001")
    assert r.returncode == 0, r.stderr
    assert "With the Hugging Face Trainer:" in r.stdout and "bf16=True" in r.stdout
    assert "With the Lightning Trainer:" in r.stdout and 'precision="bf16-mixed"' in r.stdout
    assert "torch.autocast" in r.stdout  # the plain form first


@pytest.mark.slow  # not `timing`: no experiments, a lowered bar, and a timing test never runs beside it
def test_a_hugging_face_trainer_job_is_told_bf16_true_in_its_training_arguments(tmp_path):
    script = FRAMEWORKS / "hf_trainer.py"
    report = _quick(tmp_path, script)
    framework = report["observed"]["framework"]
    assert framework["name"] == "transformers.Trainer" and framework["settings"]["bf16"] is False
    if (pr001 := _pr001(report)) is None:
        return
    fix = pr001["fix"]
    assert fix["overrides"] == {"autocast": "bfloat16"}  # the same override is measured ...
    assert fix["snippet"].endswith("TrainingArguments(..., bf16=True)") and "torch.autocast" not in fix["snippet"]
    line = _line_of(script, "= TrainingArguments(")
    assert fix["framework"]["configured_at"]["line"] == line
    assert f"where the Hugging Face Trainer is configured, at hf_trainer.py:{line}" in report["stdout"]

    report = _quick(tmp_path, script, "--bf16", out="run-bf16")
    assert report["observed"]["framework"]["settings"]["bf16"] is True
    assert "PR001" not in {f["code"] for f in report["findings"]}  # already on: never proposed


@pytest.mark.slow  # not `timing`: as above
def test_training_arguments_built_from_flags_are_told_the_flag(tmp_path):
    """run_clm.py's way: HfArgumentParser builds the TrainingArguments, so the fix is `--bf16` on the
    command line, and the line named is the parser's."""
    script = FRAMEWORKS / "hf_flags.py"
    flags = ("--output_dir", str(tmp_path / "out"), "--max_steps", "400", "--per_device_train_batch_size", "16",
             "--use_cpu", "--report_to", "none", "--save_strategy", "no", "--logging_strategy", "no", "--disable_tqdm", "True")
    report = _quick(tmp_path, script, *flags)
    if (pr001 := _pr001(report)) is None:
        return
    fix = pr001["fix"]
    assert fix["framework"]["command_line"] is True
    assert fix["snippet"] == "+ python hf_flags.py ... --bf16", fix["snippet"]
    line = _line_of(script, "HfArgumentParser((")
    assert fix["framework"]["configured_at"]["line"] == line
    assert f"on the script's command line (its HfArgumentParser, at hf_flags.py:{line})" in report["stdout"]

    report = _quick(tmp_path, script, *flags, "--bf16", out="run-bf16")
    assert "PR001" not in {f["code"] for f in report["findings"]}


@pytest.mark.slow  # not `timing`: as above
def test_a_lightning_job_is_told_its_trainers_precision(tmp_path):
    script = FRAMEWORKS / "lit_module.py"
    report = _quick(tmp_path, script)
    assert report["observed"]["framework"]["name"] == "lightning.Trainer"
    if (pr001 := _pr001(report)) is None:
        return
    assert pr001["fix"]["snippet"].endswith('L.Trainer(..., precision="bf16-mixed")')
    assert pr001["fix"]["framework"]["configured_at"]["line"] == _line_of(script, "= L.Trainer(")

    report = _quick(tmp_path, script, "--precision", "bf16-mixed", out="run-bf16")
    assert "bf16" in str(report["observed"]["framework"]["settings"]["precision"])
    assert "PR001" not in {f["code"] for f in report["findings"]}


@pytest.mark.slow
@pytest.mark.timing
@pytest.mark.flaky(reruns=3)  # its baselines drift 8-15% between windows: 2 of 7 runs alone did not verify bf16
def test_the_recommendation_reads_in_the_trainers_words(advise):
    """The measured recommendation, not only the finding, speaks the Trainer's words. (bf16 on this
    job: 1.51x (1.46-1.56) in-process on a 2-core CPU with native bf16; TrainingArguments(bf16=True)
    by hand 1.33x, three interleaved pairs 1.25-1.57x.) The time to verify it: its baselines drift
    10-15% between 8-step windows, which sets the bar; 20-step windows and a minute of passes."""
    r = advise("profile", "--steps", "20", "--warmup", "3", "--profile-steps", "2", "--select", "PR001",
               "--time-budget", "60", "--out", "run", str(FRAMEWORKS / "hf_trainer.py"), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    if (pr001 := _pr001(r.report)) is None:
        return
    assert pr001["experiment"] is not None and pr001["experiment"]["overrides"] == {"autocast": "bfloat16"}
    rec = r.report["recommended"]
    assert rec is not None and rec["verified"], (pr001["experiment"], r.stdout[-2000:])
    assert [s["snippet"] for s in rec["snippets"]] == ["- args = TrainingArguments(...)\n"
                                                       "+ args = TrainingArguments(..., bf16=True)"]
    # the script sets bf16 from its own --bf16 flag: the advice is that flag, not code written over it (issue 66)
    script = str(FRAMEWORKS / "hf_trainer.py")
    assert rec["patch"]["run_with"] == f"python {script} --bf16", rec["patch"]
    assert f"      run it with: python {script} --bf16" in r.stdout
    assert "+ args = TrainingArguments(..., bf16=True)" not in r.stdout


@pytest.mark.slow
@pytest.mark.timing
@pytest.mark.flaky(reruns=2)  # 8-step windows: in CI of 807eb00 both tries left bf16 unrecommended
def test_a_lightning_jobs_bf16_arm_is_the_trainers_own_precision(advise):
    """The arm measures what the user will type: Lightning's precision plugin switched to "bf16-mixed"
    between steps (autocast around the whole training_step, cast cache off), not an autocast wrapper
    at the model's call (on Lightning's basics/transformer.py that form read 1.94x where the user's
    precision="bf16-mixed" gave 1.50x), and back to "32-true" after. 20-step windows, as the
    Trainer's test: 8-step ones drift more than bf16 gains on some CPUs."""
    r = advise("profile", "--steps", "20", "--warmup", "3", "--profile-steps", "2", "--select", "PR001", "--time-budget", "60",
               "--out", "run", str(FRAMEWORKS / "lit_module.py"), "--say-precision", timeout=600)  # passes to verify it
    assert r.returncode == 0, r.stderr[-3000:]
    if (pr001 := _pr001(r.report)) is None:
        return
    assert pr001["experiment"] is not None and pr001["experiment"]["overrides"] == {"autocast": "bfloat16"}
    said = [line.split()[1] for line in (r.out / "script.log").read_text().splitlines() if line.startswith("precision ")]
    switched = [i for i, p in enumerate(said) if p == "bf16-mixed"]
    assert switched and said[0] == "32-true" and said[switched[-1] + 1:] and set(said[switched[-1] + 1:]) == {"32-true"}, said
    rec = r.report["recommended"]
    assert rec is not None, (pr001["experiment"], r.stdout[-2000:])
    assert rec["snippets"][0]["snippet"].endswith('L.Trainer(..., precision="bf16-mixed")'), rec
