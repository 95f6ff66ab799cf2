"""What the rules' tests read: recorded traces, probe-shaped profiles, real runs of planted scripts.

Each rule's tests live in tests/rules/test_<code>.py and import from here only the inputs they
use, so the top of that file lists the rule's fixtures (as ruff keeps one fixture file per rule).

Traces are found by conftest.trace_path: tests/data/traces (shipped, licensed) first, then the
shared traces folder (the rest; those tests skip loudly without it, and CI fails). Expected
answers come from the traces' README (kineto tb_plugin's own expected output for the ResNet-50
pair: a DataLoader flag on num_workers=0 only, an AMP hint on both with 68% of kernel time in
tensor-core-eligible ops) and from what each file is known to contain.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pandas as pd

from advisor.engine import Settings, run_rules
from advisor.profile import Profile
from advisor.rules.registry import load_rules
from conftest import WORKLOADS, advise_cmd, trace_path

CATALOGUE = load_rules()

# --------------------------------------------------------------------------- recorded GPU traces

NW0 = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
NW0_B = "kineto/resnet50_num_workers_0/worker0.1623143566756.pt.trace.json.gz"
NW4 = "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"
NW4_B = "kineto/resnet50_num_workers_4/worker0.1623213129365.pt.trace.json.gz"
LAB_FP32 = "ml-accelerator-profiling-labs/fp32.pt.trace.json"
LAB_AMP = "ml-accelerator-profiling-labs/amp.pt.trace.json"
DEEPSEEK = "deepseek-profile-data/train.json"
MI300_RESNET_AMP = "tracelens/mi300/resnet_act_checkpoint.json.gz"
QWEN_BF16 = "tracelens/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
BERT_H100 = "tracelens/h100/gaunernst_bert-small-uncased__1016001.json.gz"
GPU_BOUND_V100 = "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
LOW_UTIL_A100 = "hta/nccl_parser_config/nccl_data.json.gz"
COMM_A100 = "hta/negative_queue_length_values_check/rank0.json.gz"  # rank 0 of 16, TorchRec all2all
FUSED_ADAM_A100 = "hta/trace_diff/control/control.json.gz"
MLP_V100 = "hta/df_index_resolver/df_index_resolver.json.gz"
EVENT_SYNC = "hta/critical_path/cuda_event_sync/event_sync_trace.json.gz"
TRITON_A100 = "hta/triton_example/triton_example.json.gz"
MI250_TOY = "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
# Ranks 0 and 1 of a 128-rank NCCL job: the cross-rank (PAR) rules' GPU evidence.
PAIR = ("hta/trace_filter/sampled_rank-0.json.gz", "hta/trace_filter/sampled_rank-1.json.gz")

COMPILE_LADDER = [{"compile": "reduce-overhead"}, {"compile": "max-autotune-no-cudagraphs"}]


@lru_cache(maxsize=None)
def _profile(relative: str) -> Profile:
    return Profile.from_trace(trace_path(relative))


def profile_of(relative: str, **env) -> Profile:
    """The trace's Profile, optionally as if the probe had recorded `env` (flags, capability)."""
    base = _profile(relative)
    if not env:
        return base
    return Profile(steps=base.steps, trace=base.trace, env={**base.env.record(), **env}, meta=base.meta)


def findings(relative: str, select: str = "ALL", options: dict | None = None, **env) -> dict[str, dict]:
    """The trace's findings by code, as report.json has them; no rule warns, none fires twice."""
    found, warnings = run_rules(profile_of(relative, **env), Settings(select=[select], options=options or {}), CATALOGUE)
    assert warnings == []
    found = [f.to_dict() for f in found]  # as report.json has them
    codes = [f["code"] for f in found]
    assert len(codes) == len(set(codes))
    return {f["code"]: f for f in found}


def by_code(profile: Profile, select: str = "PAR") -> dict[str, dict]:
    """`profile`'s findings by code (PAR rules unless `select` says otherwise); no rule warns."""
    found, warnings = run_rules(profile, Settings(select=[select]), CATALOGUE)
    assert warnings == []
    return {f.code: f.to_dict() for f in found}


@lru_cache(maxsize=None)
def pair() -> Profile:
    """The NCCL pair as one job: rank 0's Profile carrying both ranks."""
    profiles = [Profile.from_trace(trace_path(p)) for p in PAIR]
    primary = profiles[0]
    primary.ranks = profiles
    return primary


# --------------------------------------------------------------------------- probe-shaped profiles


def run_rules_json(*args, **kwargs):
    """run_rules, its findings as report.json has them (the serialised contract)."""
    found, warnings = run_rules(*args, **kwargs)
    return [f.to_dict() for f in found], warnings


def probe_profile(*, workers=0, threads=2, cores=2, cpu_percent=195.0, samples=32, batch=32, steps=6, source="optimizer",
                  optimizer_every=1, wait=0.001) -> Profile:
    """A CPU run as the probe records it: steps, CPU samples, the DataLoader and thread settings."""
    steps_df = pd.DataFrame({
        "index": range(steps), "t_start": [float(i) for i in range(steps)], "t_end": [i + 0.9 for i in range(steps)],
        "duration_s": [0.05] * steps, "data_wait_s": [wait] * steps,
        "optimizer_s": [0.002 if i % optimizer_every == 0 else 0.0 for i in range(steps)],
        "samples": [samples] * steps, "profiled": [False] * steps,
    })
    sampled = pd.DataFrame({"t": [i * 0.5 for i in range(2 * steps)], "cpu_percent": [cpu_percent] * (2 * steps),
                            "sys_cpu_percent": [cpu_percent / cores] * (2 * steps)})
    return Profile(steps=steps_df, samples=sampled, env={"device": "cpu", "cpu_count": cores, "torch_threads": threads},
                   observed={"dataloaders": [{"num_workers": workers, "batch_size": batch, "pin_memory": False}]},
                   meta={"source": "probe", "step_source": source})


# --------------------------------------------------------------------------- real runs of real scripts

# Short runs: start-up, 2 warm-up steps, 6 measured, the last 2 under the profiler; no experiments.
PROBE = ["--steps", "6", "--warmup", "2", "--profile-steps", "2", "--no-experiments", "--json"]
WORD_LM = [str(WORKLOADS / "word_lm" / "main.py"), "--vocab", "10000", "--tokens", "60000"]


def profile_script(tmp_path, *script: str) -> dict:
    """`advise profile` of `script` as a user runs it: its report.json; no rule crashed."""
    proc = subprocess.run(advise_cmd("profile", *PROBE, "--out", str(tmp_path / "run"), *script),
                          capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["status"] == "ok", report["error"]
    assert not [w for w in report["warnings"] if w.startswith("rule ")], report["warnings"]
    return report


def codes(report: dict) -> dict:
    return {f["code"]: f for f in report["findings"]}


# A real two-rank gloo DDP job on CPU (tests/workloads/ddp_straggler.py, started with torchrun once
# per test file), each case's traces in its own folder. NAME:SLEEP_MS:BATCH_RANK1.
DDP_CASES = {"slow": "slow:30:32", "even": "even:0:32", "uneven": "uneven:0:128"}


def ddp_job(root: Path, *cases: str) -> Path:
    """One launch of two gloo ranks running `cases`: rank 1 sleeps 30 ms more per step (slow), nothing
    differs (even), rank 1 gets 4x the batch (uneven)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           str(WORKLOADS / "ddp_straggler.py"), str(root), *[a for c in cases for a in ("--case", DDP_CASES[c])]]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def analyze_case(root: Path, case: str) -> dict:
    """`advise analyze` of the case's two traces, as a user runs it."""
    folder = root / case
    proc = subprocess.run(advise_cmd("analyze", "--json", str(folder / "trace_rank0.json"), str(folder / "trace_rank1.json")),
                          cwd=root, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def case_findings(root: Path, case: str) -> dict[str, dict]:
    """The same analysis in-process (the CLI's path is covered by analyze_case): a job of the case's two ranks."""
    profiles = [Profile.from_trace(root / case / f"trace_rank{r}.json") for r in (0, 1)]
    profiles[0].ranks = profiles
    assert profiles[0].job.ranks == [0, 1]
    return by_code(profiles[0])
