"""`advise profile` end to end: real scripts in real subprocesses, as a user runs them."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch

from advisor.run_dir import layout
from conftest import FAST, WORKLOADS, advise_cmd, alive_with

pytestmark = pytest.mark.slow


def test_normal_loop_writes_the_contract(advise):
    r = advise("profile", *FAST, "--out", "run", str(WORKLOADS / "train_basic.py"), "--epochs", "3", "--batch-size", "32")
    assert r.returncode == 0, r.stderr
    rep = r.report
    assert rep["schema_version"] == 1 and rep["status"] == "ok" and rep["error"] is None
    assert rep["step_source"] == "optimizer"
    assert rep["argv"] == ["--epochs", "3", "--batch-size", "32"]
    assert len(rep["steps"]) == 6
    for i, step in enumerate(rep["steps"]):
        assert step["index"] == i and step["samples"] == 32
        assert step["duration_s"] > 0 and 0 <= step["data_wait_s"] < step["duration_s"]
    # --profile-steps 2: exactly 2 measured steps under the profiler (its own warm-up step runs
    # between the measured ones, unmeasured), and the throughput rests on the other 4.
    assert [s["profiled"] for s in rep["steps"]] == [False] * 4 + [True] * 2
    tp = rep["throughput"]
    assert tp["basis"] == "unprofiled" and tp["n_steps"] == 4
    assert tp["samples_per_s"] == pytest.approx(32 / tp["step_time_mean_s"], rel=1e-6)
    assert tp["step_time_p90_s"] >= tp["step_time_median_s"] > 0
    assert rep["env"]["device"] == "cpu" and rep["env"]["torch"]
    assert rep["observed"]["dataloaders"][0]["batch_size"] == 32
    assert rep["findings"] == [] or isinstance(rep["findings"], list)
    assert all(isinstance(x, float) for x in (s["loss"] for s in rep["steps"]))
    for key in ("report_json", "trace", "steps_csv", "samples_csv", "log", "probe_json", "report_html"):
        assert (r.out / rep["artifacts"][key]).exists(), key
    assert "samples/s" in r.stdout and "median" in r.stdout


def test_trace_of_the_window_holds_the_profiled_steps(advise):
    from advisor.profile import Profile

    r = advise("profile", *FAST, "--out", "run", str(WORKLOADS / "train_basic.py"))
    assert r.returncode == 0, r.stderr
    profile = Profile.from_run_dir(r.out)
    assert len(profile.trace_steps) == 2  # the recorded steps, not the profiler warm-up
    assert int(profile.steps["profiled"].sum()) == 2  # the same steps, marked so
    page = r.out.joinpath("report.html").read_text()
    assert "(2 under the profiler" in page and "over 2 profiled steps" in page
    assert (profile.ops["name"] == "aten::addmm").any()
    assert len(profile.samples) >= 1 and profile.samples["cpu_percent"].notna().any()


def test_behaves_like_plain_python(tmp_path):
    """Same sys.argv, __name__, __file__, cwd and sys.path[0] as `python script args`."""
    script = WORKLOADS / "train_sibling.py"
    rel = os.path.relpath(script, tmp_path)
    plain = subprocess.run([sys.executable, rel, "--width", "8", "--steps", "3"], cwd=tmp_path, capture_output=True, text=True)
    assert plain.returncode == 0, plain.stderr
    probed = subprocess.run(advise_cmd("profile", *FAST, "--out", "run", rel, "--width", "8", "--steps", "300"),
                            cwd=tmp_path, capture_output=True, text=True)
    assert probed.returncode == 0, probed.stderr
    log = (tmp_path / "run" / "script.log").read_text()

    def facts(text):
        return [line.replace("'300'", "'3'") for line in text.splitlines() if line.split("=")[0] in ("ARGV", "NAME", "PATH0")]

    assert facts(plain.stderr) and facts(log) == facts(plain.stderr)


@pytest.mark.parametrize("steps, code", [("300", 0), ("7", 3)])
def test_a_module_runs_as_python_m_runs_it(tmp_path, steps, code):
    """`advise profile -m pkg.mod ARGS` as `python -m pkg.mod ARGS`: relative imports, __spec__,
    sys.argv, sys.path[0], the script's own flags (even `--steps`), its exit code and output."""
    shutil.copytree(WORKLOADS / "modpkg", tmp_path / "modpkg")
    plain = subprocess.run([sys.executable, "-m", "modpkg.train", "--width", "8", "--steps", "7", "--record", "plain.json"],
                           cwd=tmp_path, capture_output=True, text=True)
    assert plain.returncode == 3, plain.stderr
    probed = subprocess.run(advise_cmd("profile", *FAST, "--out", "run", "-m", "modpkg.train", "--width", "8",
                                       "--steps", steps, "--record", "probed.json"),
                            cwd=tmp_path, capture_output=True, text=True)
    record = json.loads((tmp_path / "probed.json").read_text())
    expected = json.loads((tmp_path / "plain.json").read_text())
    assert record == dict(expected, argv=["--width", "8", "--steps", steps, "--record", "probed.json"])
    assert record["spec"] == "modpkg.train" and record["argv0"].endswith("modpkg/train.py") and record["path0"] == str(tmp_path)
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["script"] == "-m modpkg.train"
    log = (tmp_path / "run" / "script.log").read_text()
    if code:  # the script ended by itself, before the window: its output and exit status are reported as python gives them
        assert log.splitlines()[:2] == plain.stdout.splitlines()[:2] == ["training for 7 steps", "done"]
        assert probed.returncode != 0 and "status 3" in (report.get("error") or ""), (probed.returncode, report.get("error"))
    else:
        assert probed.returncode == 0, probed.stderr[-2000:]
        assert report["status"] == "ok" and len(report["steps"]) == 6


def test_modules_in_the_cwd_do_not_shadow_the_probes_imports(advise, tmp_path):
    """`python train.py` does not put the cwd on sys.path; a ./timeit.py there must not break torch."""
    (tmp_path / "timeit.py").write_text("raise RuntimeError('the stdlib timeit is shadowed')\n")
    r = advise("profile", *FAST, "--out", "run", str(WORKLOADS / "train_basic.py"))
    assert r.returncode == 0, (r.out / "script.log").read_text()[-2000:]


def test_script_exception_is_reported_as_theirs(advise):
    r = advise("profile", *FAST, "--out", "run", str(WORKLOADS / "crash_at_step3.py"))
    assert r.returncode == 1
    rep = r.report
    assert rep["status"] == "failed"
    assert rep["error"] == "ValueError: planted failure at step 3"
    tb = rep["traceback"]
    assert "crash_at_step3.py" in tb and "in check" in tb
    assert "advisor" not in tb and "runpy" not in tb
    assert "planted failure at step 3" in r.stderr and "Traceback" in r.stderr
    assert "advisor/" not in r.stderr  # none of our frames


@pytest.mark.parametrize("dies", [False, True], ids=["device-calls-raise", "device-call-kills"])
def test_a_cuda_error_that_poisons_the_device_stays_the_scripts_error(advise, dies):
    """After a device-side assert every CUDA call raises, the probe's own after the script's (its
    memory figures, the device's fields), or kills the process: the script's error is on disk before
    any of them, each fails soft, and the report names the script's error, not a child that died
    before writing its results (tests/workloads/gpu/device_assert.py on a real GPU)."""
    r = advise("profile", *FAST, "--out", "run", str(WORKLOADS / "poisoned_device.py"), *(["--dies"] if dies else []))
    assert r.returncode == 1, r.stderr
    rep = r.report
    assert rep["status"] == "failed" and rep["error"] == "RuntimeError: CUDA error: device-side assert triggered"
    assert "torch.cuda.synchronize()" in rep["traceback"] and "advisor" not in rep["traceback"]
    assert len(rep["steps"]) == 1  # the step measured before the error stands
    if not dies:
        assert rep["env"]["device"] == "cuda" and rep["env"]["device_name"] is None  # the device could not say
        memory = json.loads((r.out / "probe.json").read_text())["memory"]
        assert memory["error"] == "RuntimeError: CUDA error: device-side assert triggered"


def test_hang_without_steps_times_out_and_kills_the_group(advise):
    t0 = time.monotonic()
    r = advise("profile", "--timeout", "3", "--out", "run", str(WORKLOADS / "never_steps.py"))
    elapsed = time.monotonic() - t0
    assert r.returncode == 1
    rep = r.report
    assert rep["status"] == "timeout"
    assert "timed out after 3 s" in rep["error"] and "advisor.step()" in rep["error"]
    assert elapsed < 3 + 20
    assert not alive_with(str(r.out))


def test_manual_sgd_without_torch_optim_uses_backward_steps(advise):
    r = advise("profile", *FAST, "--out", "run", str(WORKLOADS / "manual_sgd.py"))
    assert r.returncode == 0, r.stderr
    rep = r.report
    assert rep["step_source"] == "backward" and len(rep["steps"]) == 6
    assert any("backward" in w for w in rep["warnings"])


def test_explicit_marker_and_its_batch_size(advise):
    r = advise("profile", *FAST, "--out", "run", str(WORKLOADS / "explicit_marker.py"))
    assert r.returncode == 0, r.stderr
    rep = r.report
    assert rep["step_source"] == "explicit"
    assert {s["samples"] for s in rep["steps"]} == {24}
    assert rep["throughput"]["samples_per_s"] > 0


def test_two_optimizers_make_one_step_per_iteration(advise):
    r = advise("profile", *FAST, "--out", "run", str(WORKLOADS / "gan_two_optimizers.py"))
    assert r.returncode == 0, r.stderr
    iters = [int(line.split()[1]) for line in (r.out / "script.log").read_text().splitlines() if line.startswith("iter ")]
    # startup step + 2 warm-up + 6 measured + the profiler's warm-up step = 10 iterations end at
    # the 10th boundary: iteration index 9.
    assert iters[-1] == 9
    assert len(r.report["steps"]) == 6


def test_dataloader_workers_are_reaped(advise):
    r = advise("profile", *FAST, "--out", "run", str(WORKLOADS / "workers_loader.py"))
    assert r.returncode == 0, r.stderr
    rep = r.report
    assert rep["observed"]["dataloaders"][0]["num_workers"] == 2
    assert not alive_with(str(r.out))


def test_script_that_finishes_early_reports_what_it_measured(advise):
    r = advise("profile", "--steps", "20", "--warmup", "2", "--out", "run", str(WORKLOADS / "short_run.py"))
    assert r.returncode == 0, r.stderr
    rep = r.report
    assert rep["status"] == "ok" and len(rep["steps"]) == 7  # 10 boundaries - startup - 2 warm-up
    assert any("finished after 7 measured steps" in w for w in rep["warnings"])
    assert "finished normally" in (r.out / "script.log").read_text()
    # it ended before the profiled window: the rules read nothing, and no report says "no bottleneck found"
    assert not any(s["profiled"] for s in rep["steps"])
    assert any(w.startswith("no step ran under the profiler (the script ended after 7 measured steps") for w in rep["warnings"])
    html = (r.out / "report.html").read_text()
    for text in (r.stdout, html):
        assert "no step ran under the profiler" in text and "no bottleneck found" not in text


def test_ctrl_c_stops_the_child_and_keeps_what_was_measured(tmp_path):
    proc = subprocess.Popen(advise_cmd("profile", "--steps", "500", "--warmup", "1", "--out", "run", str(WORKLOADS / "slow_forever.py")),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    steps_file = tmp_path / "run" / "steps.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if steps_file.exists() and steps_file.read_text().count('"measure"') >= 3:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    rep = json.loads((tmp_path / "run" / "report.json").read_text())
    assert rep["status"] == "interrupted" and len(rep["steps"]) >= 3
    assert not alive_with(str(tmp_path / "run"))


@pytest.mark.parametrize(
    "args, message",
    [
        (["profile", "does_not_exist.py"], "does not exist"),
        (["profile", "--steps", "0", "{script}"], "--steps"),
        (["analyze", "missing.json"], "missing.json"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(advise, args, message):
    args = [a.format(script=WORKLOADS / "train_basic.py") for a in args]
    r = advise(*args)
    assert r.returncode == 2
    assert message in r.stderr and "Traceback" not in r.stderr


def test_json_flag_prints_the_report(advise):
    r = advise("profile", *FAST, "--out", "run", "--json", str(WORKLOADS / "train_basic.py"))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == r.report


def test_torchrun_gives_each_rank_its_own_files_and_the_job_one_report(tmp_path):
    """Under an external torchrun each rank keeps its own files; rank 0 writes the job's one report
    (every rank in `ranks`) and the job prints one summary."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "advisor", "profile", *FAST, "--out", "run", str(WORKLOADS / "ddp_gloo.py")]
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rep = json.loads((tmp_path / "run" / "report.json").read_text())
    assert rep["status"] == "ok" and rep["env"]["rank"] == 0 and rep["env"]["world_size"] == 2 and len(rep["steps"]) == 6
    assert [(r["rank"], r["status"]) for r in rep["ranks"]] == [(0, "done"), (1, "done")]
    assert rep["artifacts"]["report_html"] == "report.html" and (tmp_path / "run" / "report.html").is_file()
    for rank in (0, 1):
        assert (tmp_path / "run" / f"trace.rank{rank}.json.gz").is_file() and (tmp_path / "run" / f"steps.rank{rank}.csv").is_file()
    assert not list((tmp_path / "run").glob("report.rank*.json"))
    assert proc.stdout.count("report: run/report.json") == 1 and proc.stdout.count("advise ok") == 1, proc.stdout


def test_gradient_accumulation_counts_optimizer_steps_not_micro_batches(advise):
    r = advise("profile", *FAST, "--out", "run", str(WORKLOADS / "grad_accumulation.py"))
    assert r.returncode == 0, r.stderr
    rep = r.report
    assert rep["step_source"] == "optimizer"
    assert {s["samples"] for s in rep["steps"]} == {48}  # 12 micro-batches of 4


def test_a_loop_over_tensor_pairs_knows_its_batch_size(advise):
    """No DataLoader: the batch size comes from the model's input, the (inputs, targets) pair's first dimension."""
    r = advise("profile", *FAST, "--out", "run", str(WORKLOADS / "tensor_pairs.py"))
    assert r.returncode == 0, r.stderr
    rep = r.report
    assert {s["samples"] for s in rep["steps"]} == {48}
    assert rep["throughput"]["samples_per_s"] > 0 and "batch size unknown" not in r.stdout
    if rep["throughput"]["step_time_median_s"] < 1e-3:  # sub-millisecond steps: the probe's share is said
        assert any("the probe's own bookkeeping" in w for w in rep["warnings"]), rep["warnings"]


def test_torch_warnings_point_at_the_users_line_not_the_probe(advise):
    r = advise("profile", *FAST, "--out", "run", str(WORKLOADS / "pin_memory_on_cpu.py"))
    assert r.returncode == 0, r.stderr
    log = (r.out / "script.log").read_text()
    script = WORKLOADS / "pin_memory_on_cpu.py"
    line = next(i for i, text in enumerate(script.read_text().splitlines(), 1) if "PIN_MEMORY_LINE" in text)
    assert f"{script}:{line}: UserWarning: 'pin_memory' argument is set as true" in log, log
    assert "advisor" not in log and "hooks.py" not in log


def test_the_profilers_chatter_stays_out_of_the_scripts_log(advise):
    r = advise("profile", *FAST, "--out", "run", str(WORKLOADS / "train_basic.py"), "--epochs", "3")
    assert r.returncode == 0, r.stderr
    log = (r.out / "script.log").read_text()
    for chatter in ("USDT:", "STAGE:", "CPUAllocator.cpp", "profiler_start", "Completed Stage"):
        assert chatter not in log and chatter not in r.stdout and chatter not in r.stderr, chatter
    notes = r.report.get("notes") or []
    assert not any("exited" in n for n in notes)  # the sampler stopping with the script is not news
    assert sum("NVML" in n for n in notes) <= 1
    assert not any("NVML" in w for w in r.report["warnings"])


def test_plain_progress_is_a_few_lines_per_phase(advise):
    r = advise("profile", "--steps", "300", "--warmup", "2", "--profile-steps", "2",
               "--no-experiments", "--out", "run", str(WORKLOADS / "tensor_pairs.py"))
    assert r.returncode == 0, r.stderr
    measuring = [line for line in r.stdout.splitlines() if "measuring step" in line]
    warmup = [line for line in r.stdout.splitlines() if "warm-up step" in line]
    assert 1 <= len(measuring) <= 7, measuring
    assert len(warmup) <= 3 and not any("warm-up step 0 " in line for line in warmup), warmup


def test_cpu_runs_record_the_process_trees_peak_memory(advise):
    r = advise("profile", *FAST, "--out", "run", str(WORKLOADS / "workers_loader.py"))
    assert r.returncode == 0, r.stderr
    mem = r.report["memory"]
    assert mem["basis"] in ("pss", "rss") and mem["basis_note"]
    assert mem["peak_rss_bytes"] > 50 * 2**20
    if mem["basis"] == "pss":
        # Two forked DataLoader workers share the main process's pages: summed RSS counts them thrice.
        assert mem["peak_uss_bytes"] <= mem["peak_pss_bytes"] < mem["peak_rss_bytes"]
    assert "peak memory" in r.stdout

    from advisor.gate.compare import peak_memory
    from advisor.report import Report

    value, label = peak_memory(Report.of(r.report))
    assert value == mem.get("peak_pss_bytes", mem["peak_rss_bytes"]) and "script's processes" in label


@pytest.mark.parametrize("wrap", ["none", "compile", "ddp", "autocast", "lstm", "fabric", "lightning"])
def test_a_sample_is_counted_once_per_step_whatever_wraps_the_model(advise, wrap):
    """The batch comes from the model's input: 24 samples a step whether the script compiled its
    model, wrapped it in DDP or in an autocast module, feeds a sequence-first LSTM (35, 24, ...),
    set it up with Lightning Fabric (a wrapper module around it, bf16-mixed) or fits a
    LightningModule (which calls its inner model from training_step) on a list of batches."""
    r = advise("profile", *FAST, "--out", "run", str(WORKLOADS / "model_input_wrappers.py"), "--wrap", wrap)
    assert r.returncode == 0, r.stderr
    assert {s["samples"] for s in r.report["steps"]} == {24}, r.report["steps"]


def test_a_stalled_step_is_named_and_left_out_of_the_throughput(advise):
    r = advise("profile", "--steps", "16", "--warmup", "2", "--profile-steps", "2", "--no-experiments", "--out", "run",
               str(WORKLOADS / "stalls_once.py"))
    assert r.returncode == 0, r.stderr
    rep = r.report
    durations = [s["duration_s"] for s in rep["steps"] if not s["profiled"]]
    assert max(durations) > 0.9 and rep["throughput"]["stalled_steps"] == 1, durations
    kept = sorted(durations)[:-1]  # the stall left out: the rate over the other 13 steps, exactly
    assert rep["throughput"]["samples_per_s"] == pytest.approx(32 * len(kept) / sum(kept), rel=1e-9)
    assert rep["throughput"]["samples_per_s"] > 2 * 32 * len(durations) / sum(durations)  # with it: < 1/4 of that
    assert any("1 of 14 measured steps stalled" in w for w in rep["warnings"]), rep["warnings"]


def test_a_profiler_that_refuses_to_start_leaves_the_run_going_without_a_trace(advise):
    """No CUPTI, no profiling permission: torch.profiler's start() raises at the window's first step.
    The script never sees it; the run is ok, its steps are timed, and the report says what is missing."""
    r = advise("profile", "--steps", "8", "--warmup", "2", "--profile-steps", "2", "--no-experiments", "--out", "run",
               str(WORKLOADS / "profiler_refused.py"))
    assert r.returncode == 0, r.stderr
    rep = r.report
    assert rep["status"] == "ok" and len(rep["steps"]) == 8
    said = [w for w in rep["warnings"] if "the profiler could not start" in w]
    assert len(said) == 1 and "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES" in said[0] and "step times stand" in said[0]
    assert "trace" not in rep["artifacts"] and not (r.out / layout.names().trace).exists()
    assert "could not start" in r.stdout


def test_device_tracing_refused_leaves_the_hosts_trace(advise):
    """CUPTI refuses the device's activity, the host's tracing works: the window is traced on the
    host, said once, and that trace is the run dir's (tests/test_gpu_faults.py on a real GPU)."""
    r = advise("profile", "--steps", "8", "--warmup", "2", "--profile-steps", "2", "--no-experiments", "--out", "run",
               str(WORKLOADS / "profiler_refused.py"), "--device-only", "--says-cuda")
    assert r.returncode == 0, r.stderr
    rep = r.report
    said = [w for w in rep["warnings"] if "could not trace the GPU" in w]
    assert len(said) == 1 and "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES" in said[0] and "the host's only" in said[0]
    assert rep["artifacts"]["trace"] == layout.names().trace
    assert "ProfilerStep#" in gzip.decompress((r.out / layout.names().trace).read_bytes()).decode()


def test_a_profiler_that_fails_at_its_first_recorded_step_never_reaches_the_script(tmp_path, monkeypatch):
    """torch.profiler's start() only prepares under the window's schedule; recording starts at its
    first step(). A profiler refused there stops, says why, and the script's step goes on."""
    from advisor.probe import bootstrap

    def refuse(self):
        raise RuntimeError("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: profiling is not permitted on this machine")

    monkeypatch.setattr(torch.profiler.profile, "step", refuse)
    window = bootstrap.ProfilerWindow(tmp_path / "trace.json")
    window.start()
    window.step()
    assert window.prof is None and window.error.startswith("RuntimeError: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES")
    window.step()
    window.stop()
    assert not window.exported and not (tmp_path / "trace.json").exists()
    with torch.profiler.profile() as again:  # the refused one let go: a profiler starts again
        torch.ones(2) + 1
    assert again.key_averages()


def test_a_profiler_window_that_outgrows_its_memory_limit_stops_and_keeps_its_steps(tmp_path, monkeypatch):
    """The profiler holds every event in memory: past the growth limit the window stops at a step
    boundary and exports the steps it recorded (an LBFGS script grew 3.5 GiB a step, to 17 GiB)."""

    from advisor.probe import bootstrap

    monkeypatch.setattr(bootstrap, "PROFILER_GROWTH_LIMIT", 1)  # any growth at all
    window = bootstrap.ProfilerWindow(tmp_path / "trace.json")
    x = torch.randn(64, 64)
    window.start()
    for _ in range(5):
        for _ in range(200):
            x = torch.tanh(x @ x) / 64
        window.step()
    window.stop()
    assert window.cut and window.cut.startswith("the profiler stopped after 1 profiled step: its buffers grew")
    assert window.exported and window.error is None
    text = (tmp_path / "trace.json").read_text()
    assert "ProfilerStep#1" in text and "ProfilerStep#2" not in text


@pytest.mark.parametrize("model, first", [
    (lambda: torch.nn.LSTM(8, 8), True),
    (lambda: torch.nn.LSTM(8, 8, batch_first=True), False),
    (lambda: torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(16, 2), 1, enable_nested_tensor=False), True),
    (lambda: torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(16, 2, batch_first=True), 1), False),
    (lambda: torch.nn.Linear(8, 8), False),
])
def test_sequence_first_models_are_told_by_their_layers_batch_first(model, first):
    """The encoder and decoder layers keep batch_first on their attention, not on themselves."""
    from advisor.probe.hooks import _sequence_first

    assert _sequence_first(model()) is first
