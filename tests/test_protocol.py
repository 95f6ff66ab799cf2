"""The parent-child protocol's readers on what a real child leaves, and on what a crash leaves."""

from __future__ import annotations

import json
import math
from pathlib import Path

import msgspec

from advisor.probe.runner import ProbeConfig, run_probe
from advisor.run_dir.protocol import (ArmLine, ArmStepLine, ChildAccount, Phase, PlanDone, RankLines, StepLine, WindowDone,
                                      read_account, read_lines, write_account, write_line)
from advisor.run_dir.seen import Env, MemoryAccount, Observed, typed

WORKLOADS = Path(__file__).parent / "workloads"


def test_a_real_childs_account_reads_back_typed(tmp_path):
    run = run_probe(ProbeConfig(script=str(WORKLOADS / "report_config.py"), out=tmp_path / "run", warmup=1, steps=3,
                                profile_steps=0))
    account = read_account(tmp_path / "run" / "probe.json")
    assert run.status == "ok" and account == run.probe
    assert account.status == "done" and account.measured_steps == 3 and account.step_source == "optimizer"
    assert len(account.losses) == 3 and account.env.device == "cpu" and account.phase is None
    # what the rules read: the same account, typed, every field the probe wrote of its own type
    env, seen, memory = typed(Env, account.env), typed(Observed, account.observed), typed(MemoryAccount, account.memory)
    assert env == msgspec.convert(account.env, Env, strict=False)  # nothing was dropped as mistyped
    assert env.device == "cpu" and env.cpu_count >= 1 and env.torch_threads >= 1 and env.torch.startswith("2.")
    assert [(o.cls, o.n_params > 0, o.device) for o in seen.optimizers] == [("AdamW", True, "cpu")]
    assert [(dl.batch_size, dl.num_workers, dl.iterable) for dl in seen.dataloaders] == [(16, 0, False)]
    assert memory.peak_memory_bytes and memory.tensors["parameters_bytes"] > 0


def test_a_mistyped_field_is_left_unknown_not_the_whole_description():
    """A run dir from another version (or a hand-edited probe.json): the fields that read, read."""
    env = typed(Env, {"cpu_count": "many", "torch_threads": 4, "device": "cuda", "unknown_key": [1]})
    assert (env.cpu_count, env.torch_threads, env.device) == (None, 4, "cuda")
    seen = typed(Observed, {"dataloaders": [{"num_workers": 2}, {"num_workers": "x"}], "loss_dtype": "bfloat16"})
    assert seen.dataloaders == [] and seen.loss_dtype == "bfloat16"  # the list is one field: it reads whole or not
    assert typed(Observed, None) == Observed() and typed(Env, {}).device == "cpu"


def test_an_account_keeps_nan_losses_and_ignores_keys_it_does_not_know(tmp_path):
    path = tmp_path / "probe.json"
    write_account(path, ChildAccount(status="done", phase=Phase.WINDOW_DONE, losses=[float("nan"), None, 1.5]))
    data = json.loads(path.read_text())
    assert data["phase"] == "window-done"
    path.write_text(json.dumps({**data, "from_a_newer_child": 1}))
    account = read_account(path)
    assert account.phase is Phase.WINDOW_DONE and math.isnan(account.losses[0]) and account.losses[1:] == [None, 1.5]


def test_no_account_or_a_torn_one_reads_as_none(tmp_path):
    path = tmp_path / "probe.json"
    assert read_account(path) is None  # killed before it wrote one
    path.write_text('{"status": "do')
    assert read_account(path) is None
    path.write_text('["not", "an", "account"]')
    assert read_account(path) is None
    path.write_text('{"status": "done", "measured_steps": "three"}')
    assert read_account(path) is None


def _step(phase: str, index: int) -> StepLine:
    return StepLine(phase=Phase(phase), index=index, t_start=1.0, t_end=1.5, duration_s=0.5, host_s=0.5, cpu_s=0.4,
                    clock="host", samples=8)


def test_step_lines_are_read_whole_typed_and_a_torn_line_is_skipped(tmp_path):
    path = tmp_path / "steps.jsonl"
    with open(path, "w") as f:
        for line in (_step("warmup", -1), _step("measure", 0)):
            write_line(f, line)
    whole = path.read_text().splitlines()
    path.write_text(whole[0] + "\n" + whole[1][:30] + "\n" + whole[1] + "\n" + whole[1][:20])  # torn twice
    lines, offset = read_lines(path)
    assert lines == [_step("warmup", -1), _step("measure", 0)]
    with open(path, "a") as f:
        f.write(whole[1][20:] + "\n")
    more, _ = read_lines(path, offset)
    assert more == [_step("measure", 0)]


def test_each_line_decodes_to_its_own_type_and_a_nan_loss_stays_told_apart(tmp_path):
    """A step line, an arm step, the window's end and a plan's end share steps.jsonl: each is read
    back as the struct its phase names. JSON has no NaN: an arm step's NaN loss is written as null
    with loss_finite false, so a diverged fix never reads as a loss not seen."""
    arm = ArmStepLine(round=1, window=2, arm="a1", index=0, t_start=1.0, t_end=1.5, duration_s=0.5, host_s=0.5,
                      cpu_s=0.4, clock="device", loss=None, loss_finite=False)
    sent = [_step("measure", 0), WindowDone(), arm, PlanDone(round=1, error="CUDA out of memory")]
    path = tmp_path / "steps.jsonl"
    with open(path, "w") as f:
        for line in sent:
            write_line(f, line)
    got, _ = read_lines(path)
    assert got == sent and [type(x) for x in got] == [StepLine, WindowDone, ArmStepLine, PlanDone]
    windows = tmp_path / "arms.jsonl"
    with open(windows, "w") as f:
        write_line(f, ArmLine(round=1, window=2, arm="a1", overrides={"compile": True}, oom=True))
    assert read_lines(windows, arms=True)[0] == [ArmLine(round=1, window=2, arm="a1", overrides={"compile": True}, oom=True)]


def test_rank_lines_are_read_once_and_kept_by_kind(tmp_path):
    lines = RankLines(tmp_path / "steps.jsonl", tmp_path / "arms.jsonl")
    assert lines.read() == [] and lines.measured == []  # nothing written yet
    with open(tmp_path / "steps.jsonl", "w") as f:
        write_line(f, _step("warmup", -1))
        write_line(f, _step("measure", 0))
    assert len(lines.read()) == 2 and lines.read() == []  # each line once
    with open(tmp_path / "steps.jsonl", "a") as f:
        write_line(f, _step("measure", 1))
    lines.read()
    assert [x.index for x in lines.measured] == [0, 1] and len(lines.window) == 3


def test_the_parent_watches_rank_0_whichever_rank_the_script_started_first(tmp_path):
    """mp.spawn starts the ranks together, and rank 1's step lines may come first: the parent then
    latched onto the script's own (empty) lines, never saw the window end, and the job waited for a
    plan until its deadline (600 s; one spawned job in about seven). Rank 0's lines, when they
    come, are the job's; a script whose own process steps (Lightning's re-run ranks) keeps its own."""
    from advisor.probe.job_shapes import ScriptRanks

    spawned = ScriptRanks(ProbeConfig(script="train.py", out=tmp_path), tmp_path)
    (tmp_path / "steps.jsonl").touch()  # the script's own process only starts the ranks
    (tmp_path / "steps.rank1.jsonl").write_text('{"phase": "warmup"}\n')
    assert spawned.poll() is False and spawned.names.steps_jsonl == "steps.jsonl"
    (tmp_path / "steps.rank0.jsonl").write_text('{"phase": "warmup"}\n')
    assert spawned.poll() is True and spawned.names.steps_jsonl == "steps.rank0.jsonl" and spawned.spawned == [0, 1]
    assert spawned.poll() is False  # once

    lightning = tmp_path / "lightning"
    lightning.mkdir()
    own = ScriptRanks(ProbeConfig(script="train.py", out=lightning), lightning)
    (lightning / "steps.jsonl").write_text('{"phase": "warmup"}\n')  # the script's process is rank 0
    (lightning / "steps.rank1.jsonl").write_text('{"phase": "warmup"}\n')
    assert own.poll() is False and own.poll() is False and own.names.steps_jsonl == "steps.jsonl"
    assert own.spawned == [1]


def test_one_list_of_step_columns_from_the_clock_to_the_report():
    """The clock writes StepTimes; steps.csv keeps STEP_COLUMNS, made of them; the report's Step
    shows a subset of those (and the loss, read after the window)."""
    from advisor.report_blocks import Step
    from advisor.run_dir.protocol import STEP_COLUMNS, StepTimes

    assert set(StepTimes.__struct_fields__) <= set(STEP_COLUMNS)
    assert set(Step.__struct_fields__) - {"loss"} <= set(STEP_COLUMNS)
