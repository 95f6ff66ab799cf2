"""The loop's phases (advisor.probe.phases): evaluation passes and checkpoint saves inside the
measured window are timed as their own, kept out of the training steps' time and samples, said in
report.json, the terminal and the page, and never read as a contended machine. Real children."""

from __future__ import annotations

import csv

import pandas as pd
import pytest

from advisor.analysis import steptime
from conftest import WORKLOADS

pytestmark = pytest.mark.slow

WINDOW = ["--steps", "20", "--warmup", "3", "--profile-steps", "2", "--no-experiments", "--out", "run"]


def _profile(advise, *script_args: str):
    r = advise("profile", *WINDOW, str(WORKLOADS / "eval_and_checkpoint.py"), *script_args)
    assert r.returncode == 0, r.stderr
    with open(r.out / "steps.csv") as f:
        rows = list(csv.DictReader(f))
    return r, r.report, rows


def _phases_are_no_stalls(r) -> None:
    """No step with an evaluation or a checkpoint read as a stall. The other xdist worker may stall
    a training step (the kernel's wait clock then says why): that is the machine, not a phase."""
    report, frame = r.report, pd.read_csv(r.out / "steps.csv")
    timed = frame[~frame["profiled"]]
    stalls = steptime.stalled(timed)
    phase = (timed["evals"] > 0) | (timed["checkpoints"] > 0)
    assert not (stalls & phase).any(), timed[stalls]
    assert report["throughput"]["stalled_steps"] == int(stalls.sum())
    if stalls.any():
        assert [w for w in report["warnings"] if "stalled" in w and "the kernel's wait clock" in w], report["warnings"]


def test_an_evaluation_on_its_own_loader_and_a_checkpoint_are_phases_not_stalls(advise):
    """Every 5 steps a pass over a validation DataLoader (8x a step) and a checkpoint: each is timed
    in the step it falls in, the steps' samples are the training batch's (not 16 + 512), the rates
    rest on the training time, and the page and the terminal say the shares and how often."""
    r, report, rows = _profile(advise, "--mode", "loader", "--every", "5", "--save-every", "5")
    assert {int(row["samples"]) for row in rows} == {16}
    evals = [float(row["eval_s"]) for row in rows if int(row["evals"])]
    saves = [float(row["checkpoint_s"]) for row in rows if int(row["checkpoints"])]
    assert 3 <= len(evals) <= 5 and all(e > 0.07 for e in evals), rows
    assert 3 <= len(saves) <= 5 and all(s > 0 for s in saves), rows
    _phases_are_no_stalls(r)
    phases = {p["name"]: p for p in report["phases"]}
    assert set(phases) == {"evaluation", "checkpoint"}
    assert phases["evaluation"]["every_steps"] == pytest.approx(5, abs=1.5) and phases["evaluation"]["share"] > 0.3
    spans = [float(row["duration_s"]) for row in rows]
    assert phases["evaluation"]["seconds"] == pytest.approx(sum(evals))
    assert phases["evaluation"]["share"] == pytest.approx(sum(evals) / sum(spans))
    # the rate: the training batch over the training time, the evaluations and saves left out
    assert report["throughput"]["step_time_median_s"] < 0.05 and max(spans) > 0.08
    assert "loop phases" in r.stdout and "evaluation" in r.stdout and "every 5 steps" in r.stdout
    page = (r.out / "report.html").read_text()
    assert "Outside the training steps" in page and "checkpoint" in page


def test_an_evaluation_between_model_eval_and_model_train_is_a_phase(advise):
    """nanoGPT's estimate_loss shape: model.eval(), forwards on held-out tensors, model.train(); no
    DataLoader of its own."""
    r, report, rows = _profile(advise, "--mode", "module", "--every", "4")
    assert {int(row["samples"]) for row in rows} == {16}
    assert [p["name"] for p in report["phases"]] == ["evaluation"]
    assert report["phases"][0]["count"] >= 4 and report["phases"][0]["every_steps"] == pytest.approx(4, abs=1)
    _phases_are_no_stalls(r)


def test_an_eval_mode_forward_in_every_step_stays_the_steps_work(advise):
    """An EMA copy's forward between ema.eval() and ema.train() in every step: timed, but part of the
    step (it runs in most steps), so no phase is said and the steps keep its time."""
    r, report, rows = _profile(advise, "--mode", "ema")
    assert sum(int(row["evals"]) for row in rows) >= len(rows) - 1
    assert report["phases"] == [] and "loop phases" not in r.stdout
    frame = pd.DataFrame({"duration_s": [float(row["duration_s"]) for row in rows],
                          "eval_s": [float(row["eval_s"]) for row in rows],
                          "evals": [int(row["evals"]) for row in rows]})
    assert steptime.durations(frame).tolist() == frame["duration_s"].tolist()


def test_an_epochs_start_is_the_loaders_cost_its_end_a_phase_and_two_saves_are_one_checkpoint(advise):
    """pytorch/vision's train.py shape: epochs of 6 steps from a loader of 4 workers without
    persistent_workers (each epoch forks them anew, and the iterator's end joins them), and each
    checkpoint written twice. The step that starts an epoch is marked, its loader's start is its
    wait on the loader; the workers' shutdown at the epoch's end is a phase of its own, outside the
    step's time, as the script's own timer has it (vision's: 0.13 s of 16 workers joined made
    advise's throughput 7% below the script's); no step is read as a stall, and a checkpoint comes
    every 5 steps, not 2.5."""
    r, report, rows = _profile(advise, "--mode", "loader", "--every", "100", "--save-every", "5", "--save-twice",
                               "--epoch-steps", "6", "--workers", "4")
    starts = [row for row in rows if int(row["loader_starts"])]
    assert len(starts) >= 2, rows  # 20 steps: an epoch starts every 6
    others = [float(row["data_wait_s"]) for row in rows if not int(row["loader_starts"])]
    assert min(float(row["data_wait_s"]) for row in starts) > 3 * sorted(others)[len(others) // 2], rows
    _phases_are_no_stalls(r)
    (checkpoint,) = [p for p in report["phases"] if p["name"] == "checkpoint"]
    assert checkpoint["count"] == 2 * checkpoint["steps"] and checkpoint["every_steps"] == pytest.approx(5, abs=1.5)
    assert "every 5 steps" in r.stdout or "every 4 steps" in r.stdout or "every 6 steps" in r.stdout
    ends = [row for row in rows if int(row["loader_ends"])]
    assert [int(row["index"]) for row in ends] == [int(row["index"]) for row in starts], rows  # the end, then the next start
    (shutdown,) = [p for p in report["phases"] if p["name"] == "loader shutdown"]
    joined = [float(row["loader_end_s"]) for row in ends]
    assert shutdown["count"] == len(ends) and shutdown["seconds"] == pytest.approx(sum(joined)) and min(joined) > 0
    frame = pd.DataFrame(rows).astype({"duration_s": float, "checkpoint_s": float, "loader_end_s": float})
    kept = steptime.durations(frame)
    assert (kept == (frame["duration_s"] - frame["checkpoint_s"] - frame["loader_end_s"]).clip(lower=0)).all()
    assert "loader shutdown" in r.stdout


def test_a_loader_that_keeps_its_workers_has_no_shutdown_phase(advise):
    """With persistent_workers the epoch's end joins nothing: its (short) wait stays the step's."""
    _, report, rows = _profile(advise, "--mode", "loader", "--every", "100", "--epoch-steps", "6", "--workers", "2",
                               "--persistent")
    assert sum(int(row["loader_starts"]) for row in rows) >= 2, rows
    assert not any(int(row["loader_ends"]) for row in rows) and report["phases"] == []


@pytest.mark.parametrize("writer", ["dcp", "safetensors"])
def test_a_distributed_or_safetensors_checkpoint_is_a_phase(advise, writer):
    """A checkpoint written through torch.distributed.checkpoint.save or safetensors' save_file,
    modules the script imports only when it first saves, is timed as a checkpoint phase."""
    r, report, rows = _profile(advise, "--mode", "loader", "--every", "100", "--save-every", "5", "--save-with", writer)
    saves = [float(row["checkpoint_s"]) for row in rows if int(row["checkpoints"])]
    assert 3 <= len(saves) <= 5 and all(s > 0 for s in saves), rows
    assert [p["name"] for p in report["phases"]] == ["checkpoint"]


def test_an_evaluation_loaders_end_is_the_evaluations_not_the_steps_wait(advise):
    """pytorch/vision's evaluate(): model.eval(), then a validation loader of 4 workers, forked at
    the pass's start and joined at its end. All of it is the evaluation's: the step it falls in
    waits on its own loader no more than the others do."""
    r, report, rows = _profile(advise, "--mode", "loader", "--every", "5", "--eval-workers", "4")
    held = [row for row in rows if int(row["evals"])]
    assert len(held) >= 3 and all(float(row["eval_s"]) > 0.07 for row in held), rows
    others = sorted(float(row["data_wait_s"]) for row in rows if not int(row["evals"]))
    assert max(float(row["data_wait_s"]) for row in held) < others[len(others) // 2] + 0.005, rows
