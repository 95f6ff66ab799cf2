"""torch.compile's modes as one fix, and what recompiled said in one line.

A step whose GPU waits on the host issuing work gets the compile ladder (default, reduce-overhead,
max-autotune-no-cudagraphs; the default alone on a CPU), measured as one sweep with each mode's
compile cost and payoff. A compile arm counts its recompiles from torch's own records, and the
guard that failed names the input whose shape varied.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
import torch

from advisor.run_dir.seen import Env, Observed
from advisor import overrides as vocabulary
from advisor.framework import words as framework_words
from advisor.experiments import recompiles
from advisor.experiments.plan import BASELINE, candidates_from, sweep_points
from advisor.experiments.arms import RoundResult
from advisor.experiments.rounds import Rounds
from advisor.model import Finding
from advisor.probe.compile_watch import CompileWatch
from advisor.probe.module_call import ModuleCallSwitch
from advisor.reports import words
from advisor.rules import helpers as h
from advisor.run_dir.protocol import ArmLine, ArmStepLine, CompileCounts, RankLines, read_lines, write_line
from conftest import WORKLOADS, advise_cmd

GPU = h.Device("cuda", "NVIDIA H100 80GB HBM3", (9, 0), True, True, True)
CPU = h.Device("cpu", "cpu", None, False, False, False)
MODES = [{"compile": True}, {"compile": "reduce-overhead"}, {"compile": "max-autotune-no-cudagraphs"}]


# --------------------------------------------------------------------------- the vocabulary


@pytest.mark.parametrize("mode, snippet", [
    (True, "+ model = torch.compile(model)"),
    ("reduce-overhead", '+ model = torch.compile(model, mode="reduce-overhead")'),
    ("max-autotune-no-cudagraphs", '+ model = torch.compile(model, mode="max-autotune-no-cudagraphs")'),
])
def test_the_compile_override_takes_a_mode(mode, snippet):
    vocabulary.validate({"compile": mode})
    assert framework_words.snippet("compile", mode) == snippet
    assert vocabulary.describe({"compile": mode}) == f"compile={mode}"
    assert vocabulary.not_applied({"compile": mode}, {"compile": mode}) == []
    assert vocabulary.extra_warmup({"compile": mode}) == vocabulary.COMPILE_WARMUP and vocabulary.one_off({"compile": mode})
    hf = framework_words.snippet("compile", mode, {"name": framework_words.HF_TRAINER, "settings": {}})
    assert hf.endswith("torch_compile=True)" if mode is True else f'torch_compile=True, torch_compile_mode="{mode}")')


def test_a_mode_the_child_did_not_run_is_not_applied_and_an_unknown_one_is_refused_in_one_line():
    assert vocabulary.not_applied({"compile": "reduce-overhead"}, {"compile": True}) == ["compile"]
    assert vocabulary.not_applied({"compile": True}, {}) == ["compile"]
    for bad in ("max-autotune", "default", False, 1):
        with pytest.raises(vocabulary.OverrideError) as err:
            vocabulary.validate({"compile": bad})
        assert "\n" not in str(err.value) and "compile" in str(err.value)


def test_the_ladder_follows_the_device():
    """CUDA graphs and max-autotune on a GPU; on a CPU the default alone (no CUDA graphs, and no
    matmul for max-autotune to search in a training step)."""
    assert vocabulary.compile_ladder(gpu=True) == MODES
    assert vocabulary.compile_ladder(gpu=False) == [{"compile": True}]
    gpu, cpu = h.compile_fix(GPU), h.compile_fix(CPU)
    assert gpu.points() == MODES and gpu.problem() is None and gpu.applicability.value == "unsafe"
    assert "reduce-overhead" in gpu.title and gpu.snippet == "+ model = torch.compile(model)"
    assert cpu.points() == [{"compile": True}] and cpu.ladder is None


def test_a_compile_ladder_is_planned_as_one_sweep_of_three_arms():
    finding = Finding("launch-bound", "s", "high", {}, h.compile_fix(GPU), rule="launch-bound", code="GPU002")
    [candidate] = candidates_from([finding], safe_only=False)
    points = sweep_points(candidate, vocabulary.SweepContext(cpu_count=8))
    assert [p.overrides for p in points] == MODES
    assert [p.label for p in points] == ["launch-bound (compile=True)", "launch-bound (compile=reduce-overhead)",
                                         "launch-bound (compile=max-autotune-no-cudagraphs)"]
    assert candidates_from([finding], safe_only=True) == []  # compile changes numerics


# --------------------------------------------------------------------------- judged on recorded windows


def _profile():
    steps = pd.DataFrame({"duration_s": [0.02] * 10, "samples": 32, "profiled": False})
    return type("P", (), {"steps": steps, "env": Env(cpu_count=8), "observed": Observed(), "samples": pd.DataFrame()})()


def _record(lines: RankLines, round_no: int, windows, step_s: dict, counts: dict, switch_s: dict) -> RoundResult:
    """The child's lines for `windows`: each arm's steps at its step time (1% noise), its compile
    counts and its one-off switch cost."""
    rng, t = np.random.default_rng(0), 100.0
    with open(lines.steps_path, "a") as steps, open(lines.arms_path, "a") as arms:
        for k, w in enumerate(windows):
            mode = w.overrides.get("compile")
            for i in range(w.steps):
                d = step_s[mode] * (1 + rng.normal(0, 0.01))
                write_line(steps, ArmStepLine(round=round_no, window=k, arm=w.arm, index=i, t_start=t, t_end=t + d,
                                              duration_s=d, host_s=d, cpu_s=d, clock="device", samples=32, loss=1.0,
                                              loss_finite=True))
                t += d
            write_line(arms, ArmLine(round=round_no, window=k, arm=w.arm, overrides=w.overrides,
                                     applied={"compile": mode} if mode else {}, switch_s=switch_s.get(mode, 0.0),
                                     compile=counts.get(mode)))
    lines.read()
    return RoundResult.read(lines, round_no)


def test_each_mode_reports_its_compile_cost_payoff_and_recompiles_and_the_best_leads(tmp_path):
    """GPU002's ladder on recorded windows: reduce-overhead, 2.5x, leads; every sweep row
    says what its compile cost, the steps that pay it back, and how often it recompiled; the
    winner's recompiles are said in one line with the input whose shape varied."""
    finding = Finding("launch-bound", "s", "high", {}, h.compile_fix(GPU), rule="launch-bound", code="GPU002")
    rounds, lines = Rounds(tmp_path), RankLines(tmp_path / "steps.jsonl", tmp_path / "arms.jsonl")
    windows = rounds.start([finding], _profile())
    assert {w.arm for w in windows} == {BASELINE, "a1", "a2", "a3"}
    assert all(w.warmup > next(b for b in windows if b.arm == BASELINE).warmup for w in windows if w.arm != BASELINE)
    step_s = {None: 0.020, True: 0.015, "reduce-overhead": 0.008, "max-autotune-no-cudagraphs": 0.016}
    graphs = {"graphs": 2, "cudagraph_records": 4}
    counts = {True: CompileCounts(steps=13, graphs=2),
              "reduce-overhead": CompileCounts(steps=13, recompiles=1, recompiles_timed=1, cudagraph_records_timed=2,
                                               reasons=["tensor 'x' size mismatch at index 0. expected 64, actual 37"],
                                               **graphs),
              "max-autotune-no-cudagraphs": CompileCounts(steps=13, graphs=2)}
    switch_s = {True: 20.0, "reduce-overhead": 24.0, "max-autotune-no-cudagraphs": 95.0}
    result = _record(lines, 0, windows, step_s, counts, switch_s)
    rounds.advance(result)
    exp = finding.experiment
    assert exp is not None and exp.verified and exp.overrides == {"compile": "reduce-overhead"}
    assert finding.fix.overrides == {"compile": "reduce-overhead"}
    assert 'mode="reduce-overhead"' in finding.fix.snippet
    rows = {json.dumps(r["overrides"]): r for r in exp.sweep}
    assert len(rows) == 3
    for mode, cost in switch_s.items():
        row = rows[json.dumps({"compile": mode})]
        saved = step_s[None] - step_s[mode]
        assert row["switch_s"] == cost and row["payoff_steps"] == pytest.approx(cost / saved, rel=0.1)
    assert rows[json.dumps({"compile": "reduce-overhead"})]["recompiles"] == 1
    assert rows[json.dumps({"compile": True})]["recompiles"] == 0
    said = exp.recompiles["said"]
    assert rows[json.dumps({"compile": "reduce-overhead"})]["recompiled"] == said
    assert "recompiled" not in rows[json.dumps({"compile": True})]  # nothing to say
    assert said.startswith("recompiled once in 13 steps (1 in its timed steps): x's size 0 varied (64, 37)"), said
    assert "CUDA graphs recorded again 2 times in its timed steps" in said
    assert words.measured_sentence(exp).endswith(f"; {said}")
    modes = words.resource_effects(exp)  # each mode as it fared, beside the winner's sentence
    assert re.fullmatch(r"modes tried: default 1\.3\dx \(compiling 20\.00 s, paid back after [\d,]+ steps\); "
                        r"reduce-overhead [12]\.\d\dx \(compiling 24\.00 s, paid back after [\d,]+ steps, recompiled once\); "
                        r"max-autotune-no-cudagraphs 1\.2\dx \(compiling 95\.00 s, paid back after [\d,]+ steps\)", modes), modes


# --------------------------------------------------------------------------- the line


def test_the_recompile_line_names_the_input_and_dimension_that_varied():
    counts = [CompileCounts(steps=15, graphs=3, recompiles=2, recompiles_timed=1, reasons=[
                  "tensor 'x' size mismatch at index 0. expected 32, actual 17",
                  "2 <= x.size()[0]  # return F.linear(input, self.weight, self.bias)  # nn/modules/linear.py:134"]),
              CompileCounts(steps=15, recompiles=2, limit_hit=True, reasons=[
                  "tensor 'L['x']' size mismatch at index 0. expected 17, actual 29",  # dynamo's older spelling
                  "GLOBAL_STATE changed: grad_mode "])]
    s = recompiles.summary([ArmLine(round=0, window=k, arm="a1", compile=c) for k, c in enumerate(counts)])
    assert s["count"] == 4 and s["steps"] == 30 and s["timed"] == 1 and s["graphs"] == 3
    assert s["varied"] == [{"input": "x", "what": "size", "dim": 0, "values": [32, 17, 29]}]
    assert s["said"] == ("recompiled 4 times in 30 steps (1 in its timed steps): x's size 0 varied (32, 17, 29); "
                         "x's size 0 left the range it was compiled for (2 <= x.size()[0]); GLOBAL_STATE changed: "
                         "grad_mode; dynamo reached its recompile limit: from then on that code ran uncompiled")
    quiet = recompiles.summary([ArmLine(round=0, window=0, arm="a1", compile=CompileCounts(steps=10, graphs=1))])
    assert quiet["count"] == 0 and quiet["said"] is None
    assert recompiles.summary([ArmLine(round=0, window=0, arm="b")]) is None
    skipped = CompileCounts(steps=10, graphs=1, cudagraph_skips=1, cudagraph_skip_reasons=["skipping cudagraphs due to mutated inputs"])
    assert recompiles.summary([ArmLine(round=0, window=0, arm="a", compile=skipped)])["said"] == \
        "CUDA graphs skipped for 1 graph (skipping cudagraphs due to mutated inputs)"


def test_the_counts_travel_in_the_arms_line(tmp_path):
    line = ArmLine(round=1, window=2, arm="a1", overrides={"compile": "reduce-overhead"},
                   compile=CompileCounts(steps=9, graphs=2, recompiles=1, reasons=["tensor 'x' size mismatch"]))
    with open(tmp_path / "arms.jsonl", "w") as f:
        write_line(f, line)
        write_line(f, ArmLine(round=1, window=3, arm=BASELINE))
    read, _ = read_lines(tmp_path / "arms.jsonl", arms=True)
    assert read == [line, ArmLine(round=1, window=3, arm=BASELINE)] and read[1].compile is None


# --------------------------------------------------------------------------- the child's counters


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.layer(x).relu()


@pytest.fixture
def eager_compile(monkeypatch):
    """torch.compile with an eager backend of its own per call, as each mode has its own Inductor
    backend: guards, recompiles and graphs are dynamo's own, without Inductor's seconds of code
    generation per graph. The modes asked for are recorded."""
    from advisor.probe import module_call

    asked = []
    real = torch.compile

    def compile(fn, mode=None):
        asked.append(mode)

        def backend(graph, example_inputs):
            return graph.forward

        return real(fn, backend=backend)

    monkeypatch.setattr(torch, "compile", compile)
    monkeypatch.setattr(module_call, "_limit_base", {})
    limit = getattr(torch._dynamo.config, LIMIT)
    torch._dynamo.reset()
    yield asked
    torch._dynamo.reset()
    setattr(torch._dynamo.config, LIMIT, limit)


# dynamo's recompile limit: cache_size_limit before torch 2.7 named it recompile_limit (module_call reads either)
LIMIT = "recompile_limit" if hasattr(torch._dynamo.config, "recompile_limit") else "cache_size_limit"


def _window(switch: ModuleCallSwitch, watch: CompileWatch, overrides: dict, model, sizes: list[int], warmup: int):
    applied: dict = {}
    switch.on(overrides, applied)
    watch.start(warmup)
    for size in sizes:
        model(torch.randn(size, 4)).sum().backward()
        watch.step()
    switch.off()
    return applied, watch.read(always=bool(overrides.get("compile")))


def test_a_compile_arm_counts_its_recompiles_and_compiles_once_per_mode(eager_compile):
    """The module switch compiles each (model, mode) once; the watch reads dynamo's records: the
    first window compiles one graph and recompiles when the batch changes in its timed steps, a
    second window of the same mode compiles nothing, another mode compiles anew."""
    switch, watch = ModuleCallSwitch(), CompileWatch()
    switch.install()
    try:
        model = Net()
        model(torch.randn(2, 4))  # seen before the arms, as the profiled window sees it
        applied, first = _window(switch, watch, {"compile": True}, model, [8, 8, 8, 5, 5], warmup=2)
        assert applied == {"compile": True} and eager_compile == [None]
        assert first.steps == 5 and first.graphs == 2 and first.recompiles == 1 and first.recompiles_timed == 1
        assert first.reasons == ["tensor 'x' size mismatch at index 0. expected 8, actual 5"]
        _, again = _window(switch, watch, {"compile": True}, model, [7, 8], warmup=1)
        assert eager_compile == [None] and again.graphs == 0 and again.recompiles == 0  # dim 0 is dynamic now
        applied, other = _window(switch, watch, {"compile": "reduce-overhead"}, model, [8, 8], warmup=1)
        assert applied == {"compile": "reduce-overhead"} and eager_compile == [None, "reduce-overhead"]
        assert other.graphs == 1 and other.recompiles == 0  # another mode's first compile: not a recompile
        assert getattr(torch._dynamo.config, LIMIT) == 2 * 8  # each mode gets dynamo's limit of its own
        _, baseline = _window(switch, watch, {}, model, [8, 5], warmup=1)
        assert baseline is None  # nothing compiled: the baseline's line carries no counts
    finally:
        switch.off()


def test_a_model_whose_forward_is_torchs_own_is_compiled_too(eager_compile):
    """nn.Sequential's forward is in torch's files, whose frames dynamo skips: compiling its
    _call_impl alone ran it eagerly. The switch calls it through a frame of its own."""
    switch, watch = ModuleCallSwitch(), CompileWatch()
    switch.install()
    try:
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        applied, counts = _window(switch, watch, {"compile": True}, model, [8, 8], warmup=1)
        assert applied == {"compile": True} and counts.graphs == 1
    finally:
        switch.off()


# --------------------------------------------------------------------------- a real run


@pytest.mark.slow
def test_a_compile_arm_on_a_loop_whose_batch_changes_names_the_recompile_in_the_report(tmp_path):
    """advise profile on a loop whose batch size changes every two steps (8, 5, 7): the compile
    screen's window recompiles when the batch changes, and report.json says so in one line naming
    the input and its dimension, with the sizes the guard saw."""
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler for torch.compile's CPU backend")
    (tmp_path / "advise.toml").write_text('select = ["EXP001"]\n\n[untried-fix]\nfixes = "compile"\n')
    proc = subprocess.run(advise_cmd("profile", "--steps", "8", "--warmup", "2", "--profile-steps", "2", "--time-budget", "300",
                                     "--config", "advise.toml", "--out", "run", str(WORKLOADS / "varying_batch.py")),
                          cwd=tmp_path, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    tried = [f["experiment"] for f in report["findings"] if f["code"] == "EXP001"] + report["experiments"]["screened"]
    [compiled] = [e for e in tried if e["overrides"] == {"compile": True}]
    got = compiled["recompiles"]
    assert got["count"] >= 1 and got["graphs"] >= 2, got
    [varied] = got["varied"]
    assert varied["input"] == "x" and varied["dim"] == 0 and len(varied["values"]) == 2
    assert set(varied["values"]) <= {8, 5, 7}
    sizes = ", ".join(str(v) for v in varied["values"])
    assert got["said"].startswith("recompiled once in ") and got["said"].endswith(f"x's size 0 varied ({sizes})"), got


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="GPU TESTS SKIPPED: no CUDA device here")
def test_on_a_gpu_each_mode_is_measured_and_cuda_graphs_say_they_recorded_again(tmp_path):
    """A launch-bound loop whose batch changes every step: the compile ladder is measured as one
    sweep, each mode with its compile cost; reduce-overhead records a CUDA graph for each new input
    shape inside its timed steps, and its row says so."""
    proc = subprocess.run(advise_cmd("profile", "--timeout", "600", "--select", "GPU001,GPU002", "--out", "run",
                                     str(WORKLOADS / "gpu" / "launch_bound_ragged.py")),
                          cwd=tmp_path, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    [exp] = [f["experiment"] for f in report["findings"] if (f["experiment"] or {}).get("sweep")
             and all(set(r["overrides"]) == {"compile"} for r in f["experiment"]["sweep"])]
    rows = {r["overrides"]["compile"]: r for r in exp["sweep"]}
    assert set(rows) == {True, "reduce-overhead", "max-autotune-no-cudagraphs"}, rows
    assert all(r.get("switch_s") for r in rows.values()), rows
    graphs = rows["reduce-overhead"]
    assert "CUDA graphs recorded again" in graphs.get("recompiled", ""), graphs
