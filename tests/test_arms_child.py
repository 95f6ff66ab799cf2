"""One run, many arms, child side: a real probed child measures the arms of plans written by the test."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import msgspec
import pytest
import torch

from advisor.run_dir.atomic import write_json_atomic
from advisor.probe.runner import ProbeConfig, run_probe
from conftest import WORKLOADS

pytestmark = pytest.mark.slow


def drive(tmp_path: Path, script: str, plans: list[list[dict]], args: list[str] = (), **config) -> dict:
    """Run `script` with arms; the callback writes plans[i] for the i-th call (then [])."""
    out = tmp_path / "run"
    calls, snapshots = [], []

    def on_window_done(round_no: int, suffixes: list[str], lines) -> None:
        assert suffixes == [""]  # one process: its own plan, its own steps judged
        calls.append(round_no)
        snapshots.append((out / "steps.jsonl").read_text())
        i = len(calls) - 1
        if i < len(plans) and plans[i] is not None:
            write_json_atomic(out / "plan.json", {"round": i, "windows": plans[i]})

    settings = dict(warmup=1, steps=3, profile_steps=0, arms=True, plan_timeout_s=20, timeout_s=60, arms_budget_s=120)
    settings.update(config)
    config_ = ProbeConfig(script=str(WORKLOADS / script), args=list(args), out=out, **settings)
    run = run_probe(config_, on_window_done=on_window_done)
    lines = [json.loads(line) for line in snapshots[-1].splitlines()] if snapshots else []
    arms = [msgspec.structs.asdict(w) for w in run.arms.arm_windows]  # the runner's: the exchange files are gone
    return {"run": run, "config": config_, "calls": calls, "lines": lines, "arms": arms, "out": out,
            "log": (out / "script.log").read_text()}


def arm_steps(lines: list[dict], window: int, warm: bool | None = None) -> list[dict]:
    return [r for r in lines if r["phase"] == "arm" and r["window"] == window and (warm is None or r["warm"] == warm)]


def window(arm: str, overrides: dict, warmup: int = 1, steps: int = 2) -> dict:
    return {"arm": arm, "overrides": overrides, "warmup": warmup, "steps": steps}


def script_steps(log: Path, step: dict) -> list[dict]:
    """The workload's own records whose time falls inside the arm step `step`."""
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    return [r for r in rows if "t" in r and step["t_start"] <= r["t"] <= step["t_end"]]


def test_switches_take_effect_inside_the_users_loop(tmp_path):
    log = tmp_path / "log.jsonl"
    plan = [window("base", {}), window("bf16", {"autocast": "bfloat16"}), window("fp16", {"autocast": "float16"}),
            window("foreach", {"optimizer": {"foreach": True}, "torch_threads": 1, "float32_matmul_precision": "high"}),
            window("fused", {"optimizer": {"fused": True}}),
            window("cl", {"channels_last": True, "batch_size_scale": 2}),
            window("fp16+threads", {"autocast": "float16", "torch_threads": 1}),
            window("base", {})]
    got = drive(tmp_path, "arms_loop.py", [plan, []], args=["--log", str(log)])
    run, lines, arms = got["run"], got["lines"], got["arms"]
    assert run.status == "ok" and run.probe.status == "done", got["log"][-2000:]
    assert got["calls"] == [0, 1]  # window-done (round 0 next), then plan-done of round 0 (round 1 next)
    assert [r["phase"] for r in lines if r["phase"] in ("window-done", "plan-done")] == ["window-done", "plan-done"]
    by_arm = {(a["window"]): a for a in arms}
    assert len(arms) == len(plan)
    for k, w in enumerate(plan):
        if k == 2:  # fp16 alone: nothing switchable, no steps
            assert arm_steps(lines, k) == [] and by_arm[k]["not_switchable"] == ["autocast"]
            continue
        assert len(arm_steps(lines, k, warm=True)) == w["warmup"] and len(arm_steps(lines, k, warm=False)) == w["steps"]
        assert by_arm[k]["error"] is None
    for r in arm_steps(lines, 0):
        assert isinstance(r["loss"], float) and r["duration_s"] > 0

    def seen(k):  # what the script saw in window k's measured steps
        rows = [row for step in arm_steps(lines, k, warm=False) for row in script_steps(log, step)]
        assert rows
        return rows

    assert not any(r["autocast"] for r in seen(0)) and all(r["precision"] == "highest" for r in seen(0))
    assert by_arm[1]["applied"] == {"autocast": "bfloat16"}
    # bf16 inside the forward, fp32 where the loss reads it (as a fix that autocasts forward and loss)
    assert all(r["autocast"] and r["head_dtype"] == "bfloat16" and r["out_dtype"] == "float32" for r in seen(1))
    assert by_arm[3]["applied"]["optimizers"][0]["foreach"] is True and by_arm[3]["not_switchable"] == []
    assert all(r["foreach"] is True and r["threads"] == 1 and r["precision"] == "high" for r in seen(3))
    assert by_arm[4]["applied"]["optimizers"][0]["fused"] is True
    assert all(r["fused"] is True and not r["foreach"] for r in seen(4))
    assert by_arm[5]["applied"]["channels_last"] is True and by_arm[5]["applied"]["batch_size_scale"] == 2
    assert all(r["cl_input"] and r["conv_cl"] for r in seen(5))
    assert {r["x_batch"] for r in seen(5)} <= {32, 200 % 16 + 16, 200 % 16}  # scaled (or an epoch's tail)
    assert by_arm[6]["not_switchable"] == ["autocast"] and by_arm[6]["applied"] == {"torch_threads": 1}
    assert all(not r["autocast"] and r["threads"] == 1 for r in seen(6))
    # The last baseline: everything switched back off.
    assert all(not r["autocast"] and not r["cl_input"] and not r["conv_cl"] and r["foreach"] is None and r["fused"] is None
               and r["precision"] == "highest" and r["x_batch"] in (16, 8) for r in seen(7))


def test_dataloader_switch_keeps_every_epoch_whole(tmp_path):
    """Epochs of 13 batches (200 samples, batch 16) stay whole across windows with workers and scaled batches.

    The profiled run takes 5 steps, so epochs 0 and 1 (steps 0-25) span the switch to 2 workers and
    back: 13 batches each. The scaled windows serve fewer, bigger batches: their epochs still hold
    every one of the 200 samples exactly once."""
    log = tmp_path / "log.jsonl"
    plan = [window("base", {}, 1, 3), window("w2", {"dataloader": {"num_workers": 2, "prefetch_factor": 4}}, 2, 9),
            window("base", {}, 1, 5), window("scale", {"batch_size_scale": 2}, 1, 9),
            window("w2x2", {"dataloader": {"num_workers": 2}, "batch_size_scale": 3}, 1, 6), window("base", {}, 1, 20)]
    got = drive(tmp_path, "arms_loop.py", [plan, []], args=["--log", str(log)])
    assert got["run"].status == "ok", got["log"][-2000:]
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    ends = [r for r in rows if "epoch_end" in r]
    assert len(ends) >= 3
    assert ends[0]["batches"] == ends[1]["batches"] == ends[0]["len"] == 13, ends
    assert ends[-1]["batches"] == 13 and all(r["batches"] < 13 for r in ends[2:-1]), ends  # scaled epochs
    for epoch in {r["epoch_end"] for r in ends}:  # every sample of an epoch, whatever the batching
        assert sum(r["x_batch"] for r in rows if r.get("epoch") == epoch) == 200, epoch
    workers = [r for step in arm_steps(got["lines"], 1, warm=False) for r in script_steps(log, step)]
    assert workers and all(r["workers"] for r in workers)  # served by worker processes
    base = [r for step in arm_steps(got["lines"], 2, warm=False) for r in script_steps(log, step)]
    assert base and not any(r["workers"] for r in base)
    assert got["arms"][1]["applied"]["dataloaders"][0]["num_workers"] == 2 and got["arms"][1]["switch_s"] > 0


@pytest.mark.timing
def test_workers_really_speed_up_a_starved_loader(tmp_path):
    plan = []
    for _ in range(2):
        plan += [window("base", {}, 1, 4), window("w2", {"dataloader": {"num_workers": 2}}, 3, 4)]
    got = drive(tmp_path, "starved_io.py", [plan, []])
    assert got["run"].status == "ok", got["log"][-2000:]
    lines = got["lines"]
    base = statistics.median(r["duration_s"] for k in (0, 2) for r in arm_steps(lines, k, warm=False))
    fast = statistics.median(r["duration_s"] for k in (1, 3) for r in arm_steps(lines, k, warm=False))
    assert base / fast > 1.3, (base, fast)
    assert all(a["applied"]["dataloaders"][0]["num_workers"] == 2 for a in got["arms"] if a["arm"] == "w2")


def test_persistent_worker_loader_switches_and_comes_back(tmp_path):
    plan = [window("base", {}, 1, 3), window("w0", {"dataloader": {"num_workers": 1}}, 1, 3), window("base", {}, 1, 3)]
    got = drive(tmp_path, "workers_loader.py", [plan, []], warmup=1)
    assert got["run"].status == "ok", got["log"][-2000:]
    assert [len(arm_steps(got["lines"], k)) for k in range(3)] == [4, 4, 4]
    assert got["arms"][1]["applied"]["dataloaders"][0]["num_workers"] == 1


def test_a_crash_inside_an_arm_ends_cleanly(tmp_path):
    log = tmp_path / "log.jsonl"
    plan = [window("base", {}), window("bf16", {"autocast": "bfloat16"}), window("base", {})]
    got = drive(tmp_path, "arms_loop.py", [plan, None], args=["--log", str(log), "--crash-under-autocast"])
    run = got["run"]
    assert run.status == "ok" and run.probe.status == "done", got["log"][-2000:]
    assert "boom under autocast" in run.probe.arms_error
    assert run.probe.measured_steps == 3  # the profiled window's measurement stands
    assert [a["arm"] for a in got["arms"]] == ["base", "bf16"]
    assert got["arms"][0]["error"] is None and "boom under autocast" in got["arms"][1]["error"]
    done = [r for r in got["lines"] if r["phase"] == "plan-done"]
    assert len(done) == 1 and "boom under autocast" in done[0]["error"]
    assert len(arm_steps(got["lines"], 0)) == 3


@pytest.mark.timing
def test_a_baseline_after_bf16_runs_on_the_state_the_script_carried_over(tmp_path):
    """word_language_model carries its LSTM's hidden state from one batch into the next; after a
    bf16 window it is bf16, and oneDNN's fp32 LSTM raised on it in the baseline window that
    followed, ending every arm after bf16's first. The switch casts it back at the model's entrance."""
    from advisor.probe.env import _cpu_has_fast_bf16

    plan = [window("base", {}), window("bf16", {"autocast": "bfloat16"}), window("base", {}), window("bf16", {"autocast": "bfloat16"})]
    got = drive(tmp_path, "word_lm/main.py", [plan, []], args=["--vocab", "2000", "--tokens", "20000", "--epochs", "1"])
    run = got["run"]
    if not _cpu_has_fast_bf16():  # oneDNN has no bf16 LSTM without it (an AMD EPYC without AVX-512; PR001 proposes none)
        assert run.status == "ok" and "LSTM" in (run.probe.arms_error or "") and got["arms"][1]["error"], got["arms"]
        return
    assert run.status == "ok" and run.probe.arms_error is None, (run.probe.arms_error, got["log"][-2000:])
    assert [a["arm"] for a in got["arms"]] == ["base", "bf16", "base", "bf16"]
    assert all(a["error"] is None for a in got["arms"]) and got["arms"][1]["applied"]["autocast"] == "bfloat16"
    assert all(len(arm_steps(got["lines"], k, warm=False)) == 2 for k in range(4))


def test_the_automatic_budget_counts_the_way_to_the_window_from_advises_own_start(tmp_path):
    """A --no-experiments run pays advise's own start-up (its imports) as well as the script's, so
    the arms' automatic budget counts the way to the window from the command's start (`since`)."""
    import time

    from advisor.probe.config import AUTO_BUDGET_FACTOR

    got = drive(tmp_path, "arms_loop.py", [[]], args=["--log", str(tmp_path / "log.jsonl")], arms_budget_s=None,
                since=time.monotonic() - 20.0)
    assert got["run"].status == "ok", got["log"][-2000:]
    assert got["config"].arms_budget_s >= AUTO_BUDGET_FACTOR * 20.0


def test_no_plan_finishes_the_run_as_today(tmp_path):
    got = drive(tmp_path, "train_basic.py", [None], plan_timeout_s=2)
    run = got["run"]
    assert run.status == "ok" and run.probe.status == "done" and run.probe.phase is None
    assert run.probe.measured_steps == 3 and got["calls"] == [0] and got["arms"] == []
    assert 2 <= run.wall_s < 30


def test_an_empty_plan_finishes_at_once(tmp_path):
    got = drive(tmp_path, "train_basic.py", [[]])
    assert got["run"].status == "ok" and got["run"].probe.status == "done" and got["run"].wall_s < 20
    assert (got["out"] / "probe.json").exists()


def test_compile_switch_is_cached_and_a_stop_file_ends_the_run(tmp_path):
    import shutil

    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler for torch.compile's CPU backend")
    out = tmp_path / "run"
    plan = [window("c", {"compile": True}, 2, 3), window("b", {}, 1, 3), window("c", {"compile": True}, 1, 3)]
    calls = []

    def on_window_done(round_no: int, suffixes: list[str], lines) -> None:
        calls.append(round_no)
        if len(calls) == 1:
            write_json_atomic(out / "plan.json", {"round": 0, "windows": plan})
        else:
            (out / "stop").touch()  # instead of a plan: finish

    run = run_probe(ProbeConfig(script=str(WORKLOADS / "train_basic.py"), out=out, warmup=1, steps=3, profile_steps=0,
                                arms=True, plan_timeout_s=300, arms_budget_s=300), on_window_done=on_window_done)
    assert run.status == "ok" and run.probe.status == "done" and calls == [0, 1]
    arms = [msgspec.structs.asdict(w) for w in run.arms.arm_windows]
    assert not (out / "arms.jsonl").exists() and not (out / "stop").exists()  # the exchange files are cleared
    assert [a["applied"] for a in arms] == [{"compile": True}, {}, {"compile": True}]
    assert arms[0]["switch_s"] > 10 * arms[2]["switch_s"]  # compiled once, in the first window
    assert run.wall_s < 200  # the stop file ended the wait for a plan: no 300 s plan timeout


def test_tf32_that_the_libraries_ignore_is_not_reported_applied(tmp_path, monkeypatch):
    """NVIDIA_TF32_OVERRIDE=0 overrides torch's setting inside cuBLAS/cuDNN: the arm must not claim it."""
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    plan = [window("base", {}), window("tf32", {"float32_matmul_precision": "high", "torch_threads": 1}), window("base", {})]
    got = drive(tmp_path, "arms_loop.py", [plan, []], args=["--log", str(tmp_path / "log.jsonl")])
    assert got["run"].status == "ok", got["log"][-2000:]
    by_arm = {a["window"]: a for a in got["arms"]}
    assert by_arm[1]["applied"] == {"torch_threads": 1}


def test_loader_workers_started_by_spawn_are_left_to_fresh_runs():
    """A loader whose workers start by spawn (mp.spawn's ranks inherit it; macOS's default) is not
    switched in the run: each worker is a new interpreter, and an arm read 1.19x for a fix that
    fresh runs measure 4.95x (benchmarks/job_arms.py). Its start method is read off the loader,
    with what else decides it (an IterableDataset, no batching), into the window's account, where
    the parent reads it and plans no arm the child would refuse."""
    import multiprocessing

    from advisor.overrides import live_loader_refusal
    from advisor.probe.hooks import loader_kind

    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            yield torch.zeros(2)

    data = torch.utils.data.TensorDataset(torch.zeros(4, 2))
    spawned = loader_kind(torch.utils.data.DataLoader(data, num_workers=2, multiprocessing_context="spawn"))
    plain = loader_kind(torch.utils.data.DataLoader(data))
    assert spawned == {"iterable": False, "batched": True, "worker_start": "spawn"}
    assert plain["worker_start"] == multiprocessing.get_start_method()
    workers = {"dataloader": {"num_workers": 4}}
    assert live_loader_refusal(workers, spawned) == "its DataLoader workers start by spawn (a new interpreter each)"
    assert live_loader_refusal({"dataloader": {"pin_memory": True}}, spawned) is None  # no new workers asked for
    assert live_loader_refusal(workers, dict(spawned, worker_start="fork")) is None
    assert live_loader_refusal({"compile": True}, spawned) is None  # not a loader fix
    stream = loader_kind(torch.utils.data.DataLoader(Stream(), batch_size=2))
    assert stream["iterable"] and live_loader_refusal({"batch_size_scale": 2}, stream).startswith("an IterableDataset")
    unbatched = loader_kind(torch.utils.data.DataLoader(data, batch_size=None))
    assert live_loader_refusal(workers, dict(unbatched, worker_start="fork")).startswith("a DataLoader without batching")


def test_the_compile_arm_counts_each_sample_once(tmp_path):
    """torch.compile(model) calls the model's class __call__ again from its compiled frame: the
    model-input counter counted every sample twice under the compile arm (64 for 32), and the
    arm's throughput read 2x what it was."""
    plan = [window("b", {}, 1, 2), window("c", {"compile": True}, 2, 2), window("b", {}, 1, 2)]
    got = drive(tmp_path, "model_input_wrappers.py", [plan, []], args=["--steps", "100000"], arms_budget_s=300)
    assert got["run"].status == "ok", got["log"][-2000:]
    assert [a["applied"] for a in got["arms"]] == [{}, {"compile": True}, {}]
    for k in range(3):
        assert {r["samples"] for r in arm_steps(got["lines"], k)} == {24}, (k, arm_steps(got["lines"], k))


def test_expandable_segments_is_set_before_a_fresh_run_and_refused_live(tmp_path, monkeypatch):
    """The allocator reads PYTORCH_CUDA_ALLOC_CONF once: a fresh run sets it before the script starts
    (the user's other settings kept); a live arm refuses it, for the fresh runs to measure."""
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "garbage_collection_threshold:0.8")
    fresh = run_probe(ProbeConfig(script=str(WORKLOADS / "alloc_conf.py"), out=tmp_path / "fresh", warmup=1, steps=3,
                                  profile_steps=0, overrides={"expandable_segments": True}))
    log = (tmp_path / "fresh" / "script.log").read_text()
    assert fresh.status == "ok", log[-2000:]
    assert "PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.8,expandable_segments:True" in log, log
    assert fresh.probe.applied.get("expandable_segments") is True
    plan = [window("base", {}), window("segments", {"expandable_segments": True}), window("base", {})]
    got = drive(tmp_path, "alloc_conf.py", [plan, []])
    assert got["run"].status == "ok", got["log"][-2000:]
    refused = {a["window"]: a for a in got["arms"]}[1]
    assert refused["not_switchable"] == ["expandable_segments"] and "first allocation" in refused["reasons"]["expandable_segments"]


def test_the_end_of_the_time_budget_stops_a_window_at_a_step_boundary(tmp_path):
    """The budget ends inside a window far longer than it (2 workers feeding it): the runner asks the
    child to stop (its stop file), the child stops at its next step boundary, the window it cut is
    left out (its steps are written, its line is not), and the run is ok: no timeout, no traceback."""
    plan = [window("base", {}, 1, 3), window("long", {"dataloader": {"num_workers": 1}}, 2, 100000)]
    got = drive(tmp_path, "forever_workers.py", [plan], arms_budget_s=4)
    run = got["run"]
    assert run.status == "ok" and run.budget_ended and run.probe.status == "done", (run.probe.error, got["log"][-2000:])
    assert [a["arm"] for a in got["arms"]] == ["base"]  # the cut window has no line: no verdict rests on part of it
    assert any(line.window == 1 for line in run.arms.arm_steps)  # it did run, and was stopped
    assert run.wall_s < 60 and "Traceback" not in got["log"], got["log"][-2000:]


def test_a_window_closes_at_its_seconds_whatever_its_steps(tmp_path):
    """A window of 100,000 planned steps and 0.4 s closes once its timed steps took 0.4 s (and at
    least its `min_steps` ran): an arm slower than the plan predicted cannot take the budget. A floor
    of steps holds a window past its seconds, up to OVERRUN times them (a neighbour that makes each
    step 200 times slower cannot make the floor take the budget). One without seconds runs its steps."""
    plan = [window("base", {}, 1, 4), {**window("slow", {}, 1, 100_000), "seconds": 0.4, "min_steps": 6},
            {**window("floor", {}, 1, 100_000), "seconds": 0.03, "min_steps": 10_000}, window("base", {}, 1, 4)]
    got = drive(tmp_path, "starved_io.py", [plan, []], args=["--item-ms", "0.5"])
    assert got["run"].status == "ok", got["log"][-2000:]
    timed = {k: arm_steps(got["lines"], k, warm=False) for k in range(4)}
    assert len(timed[0]) == len(timed[3]) == 4
    slow = timed[1]
    took = slow[-1]["t_end"] - slow[0]["t_start"]
    assert 6 <= len(slow) < 1000 and 0.35 <= took < 1.0, (len(slow), took)
    floor = timed[2]
    took = floor[-1]["t_end"] - floor[0]["t_start"]
    # held past its 0.03 s, ended at 2x by the child's clock; the step lines' span leaves out the
    # boundaries' own work (58.4 ms against the child's 60 once, beside the suite's other worker)
    assert 2 <= len(floor) < 100 and 1.5 * 0.03 <= took < 0.6, (len(floor), took)


def test_a_loader_fix_replaces_workers_forked_each_epoch_and_keeps_its_own(tmp_path):
    """A loader of 3 workers forked anew every epoch (6 batches, no persistent_workers), as
    pytorch/vision's train.py: while the arm's 2 persistent workers serve, the script's own epochs
    start no workers (theirs would take the epoch's indices ahead, and the arm would time the
    script's loader), the arm's 2 serve every epoch it spans, and every epoch stays whole. Windows
    aligned on epochs: the timed steps start with an epoch's first step (the step before is the
    script's, its workers having taken that epoch's indices before the switch)."""
    log = tmp_path / "log.jsonl"
    aligned = lambda *a: {**window(*a), "align": True}  # noqa: E731
    plan = [aligned("base", {}, 6, 3), aligned("w2", {"dataloader": {"num_workers": 2, "persistent_workers": True}}, 6, 12),
            aligned("base", {}, 6, 6)]
    got = drive(tmp_path, "arms_loop.py", [plan, []], args=["--log", str(log), "--workers", "3", "--n", "96"])
    assert got["run"].status == "ok", got["log"][-2000:]

    def served(k):
        return [r for step in arm_steps(got["lines"], k, warm=False) for r in script_steps(log, step)]

    for k in range(3):  # each window's timed steps start an epoch
        first = arm_steps(got["lines"], k, warm=False)[0]
        assert first["loader_starts"] == 1 and len(arm_steps(got["lines"], k, warm=True)) < 6, k
    arm = served(1)
    epochs = {r["epoch"] for r in arm}
    pids = {p for r in arm for p in r["workers"]}
    assert len(epochs) == 2 and len(pids) == 2, arm  # the same two workers across its epochs
    base = {p for k in (0, 2) for r in served(k) for p in r["workers"]}
    assert base and not base & pids
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    for epoch in {r["epoch_end"] for r in rows if "epoch_end" in r}:
        assert sum(r["x_batch"] for r in rows if r.get("epoch") == epoch) == 96, epoch
