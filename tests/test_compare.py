"""`advise compare`: the statistics, the gate's verdicts, bad input, and the CLI's outputs.

Reports here are hand-built dicts in the report.json shape, with per-step times drawn from a
seeded generator, so every case is exact and fast; test_compare_e2e.py runs real scripts.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from advisor.gate import compare as cmp
from advisor.report import Report
from advisor.analysis import stats, steptime
from advisor.commands.cli import main

MiB = 2**20


def compare(baseline: dict, current: dict, **options) -> cmp.Comparison:
    """cmp.compare of two report.json dicts, typed as load_report reads them."""
    return cmp.compare(Report.of(baseline), Report.of(current), **options)


def make_report(step_ms, *, batch=32, script="train.py", device="cpu", device_name="x86_64", status="ok",
                findings=(), rss=300 * MiB, peak_allocated=None, data_wait=0.05, profiled=(), argv=(), torch="2.13.0"):
    """A report.json dict whose measured steps take `step_ms` (a list of milliseconds), its numbers
    Python's own, as report.json reads back."""
    steps = [{"index": i, "duration_s": float(ms) / 1e3, "data_wait_s": float(ms) / 1e3 * data_wait, "samples": batch,
              "optimizer_s": 0.0, "backward_s": 0.0, "profiled": i in profiled, "loss": 1.0}
             for i, ms in enumerate(step_ms)]
    return {
        "schema_version": 1, "status": status, "error": None if status == "ok" else "boom",
        "script": script, "argv": list(argv),
        "env": {"device": device, "device_name": device_name, "torch": torch, "cpu_count": 2},
        "steps": steps,
        "throughput": steptime.throughput(pd.DataFrame(steps)),
        "breakdown": {"data_wait_frac": data_wait},
        "memory": {} if peak_allocated is None else {"peak_allocated_bytes": peak_allocated},
        "utilization": {"rss_bytes_max": rss},
        "findings": [dict(f) for f in findings],
    }


def noisy(ms=40.0, n=30, cv=0.03, seed=0, outliers=0):
    """n step times around `ms` with `cv` relative noise, plus a few 3x outlier steps."""
    rng = np.random.default_rng(seed)
    times = ms * (1 + cv * rng.standard_normal(n))
    times[:outliers] *= 3
    return list(rng.permutation(times))


def metric(result, name):
    return next(m for m in result.metrics if m.name == name)


# --- statistics ----------------------------------------------------------------------------

def test_mann_whitney_asks_whether_b_is_larger():
    a, b = noisy(seed=1), noisy(44, seed=2)
    assert stats.mann_whitney(a, b, "greater") < 1e-6
    assert stats.mann_whitney(a, b, "less") > 0.99
    assert stats.mann_whitney(a, noisy(seed=3), "greater") > 0.01


def test_three_steps_against_three_can_never_reach_p_001():
    assert stats.min_p_value(3, 3) == pytest.approx(0.05)
    assert stats.min_p_value(3, 3, "two-sided") == pytest.approx(0.10)
    assert stats.min_p_value(20, 20) < 1e-10


def test_ratio_cis_cover_the_true_ratio_and_are_deterministic():
    a, b = noisy(seed=1), noisy(44, seed=2)
    boot = stats.ratio_ci(a, b)
    assert boot.low < 1.10 < boot.high and boot.above(1.0) and boot == stats.ratio_ci(a, b)
    mean = stats.ratio_ci(a, b, statistic=np.mean, confidence=0.99)
    assert mean.low < 1.10 < mean.high
    t = stats.ratio_of_means_ci_t(a, b)
    assert t.low < 1.10 < t.high and t.estimate == pytest.approx(np.mean(b) / np.mean(a))
    assert stats.ratio_ci([1.0], b) is None and stats.ratio_ci([1.0, 1.0], [1.0, 1.0]).as_list() == [1.0, 1.0]


# --- the gate ------------------------------------------------------------------------------

def test_identical_reruns_pass():
    result = compare(make_report(noisy(seed=1)), make_report(noisy(seed=2)))
    assert not result.failed and result.exit_code == 0
    assert {m.verdict for m in result.metrics if m.gated} == {cmp.OK}


def test_twice_as_slow_is_a_regression():
    result = compare(make_report(noisy(seed=1)), make_report(noisy(80, seed=2)))
    assert result.exit_code == 3
    assert [m.name for m in result.regressions] == ["throughput", "step_time_median"]
    tput = metric(result, "throughput")
    assert tput.change == pytest.approx(-0.5, abs=0.03) and tput.p_value < 1e-6
    assert tput.ci[0] < tput.change < tput.ci[1] < 0


def test_ten_percent_slower_fails_at_five_percent_and_passes_at_twenty():
    base, cur = make_report(noisy(seed=1, cv=0.02)), make_report(noisy(44, seed=2, cv=0.02))
    assert compare(base, cur, max_regression=0.05).exit_code == 3
    assert compare(base, cur, max_regression=0.20).exit_code == 0


def test_small_but_significant_slowdown_is_below_the_threshold():
    result = compare(make_report(noisy(seed=1, cv=0.01)), make_report(noisy(41.2, seed=2, cv=0.01)))
    step = metric(result, "step_time_median")
    assert step.p_value < 1e-6 and step.verdict == cmp.OK and result.exit_code == 0


def test_slower_beyond_the_threshold_but_not_significant_passes_with_a_note():
    # 12 steps each, 40% noise: the ratio is beyond 10% by chance, the ranks say nothing.
    base = make_report([40, 41, 39, 42, 38, 40, 41, 39, 40, 42, 38, 40])
    cur = make_report([40, 60, 39, 62, 38, 61, 41, 39, 40, 63, 38, 40])
    step, tput = metric(compare(base, cur), "step_time_median"), metric(compare(base, cur), "throughput")
    assert tput.verdict == cmp.NOT_SIGNIFICANT and "median step" in tput.note
    assert step.verdict == cmp.OK
    assert compare(base, cur).exit_code == 0


def test_typical_step_slower_but_not_significant_is_inconclusive_not_a_pass():
    base = make_report([30, 50, 35, 45, 40, 38, 42, 60])
    cur = make_report([35, 55, 40, 52, 47, 44, 48, 62])  # median +16%, the ranks overlap
    result = compare(base, cur)
    step = metric(result, "step_time_median")
    assert step.change > 0.10 and step.p_value > 0.01
    assert step.verdict == cmp.INCONCLUSIVE and "cannot tell" in step.note
    assert result.verdict == "inconclusive" and result.exit_code == 4
    assert result.to_dict()["inconclusive"]["metrics"] == ["throughput", "step_time_median"]
    result.inconclusive_policy = "pass"
    assert result.exit_code == 0 and result.to_dict()["verdict"] == "inconclusive"


def test_outlier_steps_do_not_fail_the_gate():
    """A neighbour's burst: 3 of 30 steps take 3x. The typical step does not change, and the throughput
    leaves the stalled steps out (with them the mean would drop 20%)."""
    result = compare(make_report(noisy(seed=1)), make_report(noisy(seed=2, outliers=3)))
    tput = metric(result, "throughput")
    assert abs(tput.change) < 0.05 and tput.verdict == cmp.OK
    assert result.exit_code == 0


def test_too_few_steps_fall_back_to_the_ratio_and_say_so():
    result = compare(make_report([40, 41, 40]), make_report([80, 81, 80]))
    assert not result.testable and result.exit_code == 3
    assert any("too few" in w for w in result.warnings) and "ratio alone" in result.rule


def test_profiled_steps_are_left_out_like_the_reports_throughput():
    """The profiler inflates its steps; both runs are compared on their un-profiled steps."""
    base = make_report(noisy(seed=1, n=20), profiled=range(15, 20))
    slow_window = noisy(seed=2, n=20)
    slow_window[15:] = [200.0] * 5
    result = compare(base, make_report(slow_window, profiled=range(15, 20)))
    assert result.n_baseline == result.n_current == 15 and result.exit_code == 0


def test_faster_is_an_improvement_not_a_failure():
    result = compare(make_report(noisy(seed=1)), make_report(noisy(30, seed=2)))
    assert metric(result, "throughput").verdict == cmp.IMPROVEMENT and result.exit_code == 0


def test_throughput_is_per_sample_when_the_batch_size_changes():
    base = make_report(noisy(seed=1), batch=32)
    cur = make_report(noisy(70, seed=2), batch=64)  # 75% longer steps, twice the samples: faster per sample
    result = compare(base, cur)
    assert metric(result, "throughput").verdict == cmp.IMPROVEMENT
    assert metric(result, "step_time_median").verdict == cmp.REGRESSION
    assert any("batch sizes differ" in w for w in result.warnings)


def test_memory_gates_only_when_clearly_higher():
    steps = noisy(seed=1)
    gpu = compare(make_report(steps, peak_allocated=2048 * MiB), make_report(steps, peak_allocated=3072 * MiB))
    assert metric(gpu, "peak_memory").verdict == cmp.REGRESSION and gpu.exit_code == 3
    assert metric(gpu, "peak_memory").label == "peak GPU memory"
    small = compare(make_report(steps, rss=100 * MiB), make_report(steps, rss=140 * MiB))  # +40% but 40 MiB
    assert metric(small, "peak_memory").verdict == cmp.OK
    within = compare(make_report(steps, rss=1000 * MiB), make_report(steps, rss=1150 * MiB))  # +15%
    assert metric(within, "peak_memory").verdict == cmp.OK and within.exit_code == 0


def test_cpu_runs_compare_the_process_trees_peak_on_a_basis_both_have():
    """CPU runs: PSS (shared worker pages counted once) when both reports have it, else RSS; never one against the other."""
    steps = noisy(seed=1)

    def cpu(pss=None, rss=None, window_rss=300 * MiB):
        report = make_report(steps, rss=window_rss)
        report["memory"] = {k: v for k, v in (("peak_pss_bytes", pss), ("peak_rss_bytes", rss)) if v is not None}
        return report

    both = compare(cpu(pss=1000 * MiB, rss=3000 * MiB), cpu(pss=1500 * MiB, rss=3100 * MiB))
    row = metric(both, "peak_memory")
    assert row.label == "peak memory (PSS of the script's processes)" and row.verdict == cmp.REGRESSION
    assert row.baseline == 1000 * MiB and row.current == 1500 * MiB
    older = compare(cpu(rss=3000 * MiB), cpu(pss=1500 * MiB, rss=3100 * MiB))  # a baseline without PSS
    row = metric(older, "peak_memory")
    assert row.label == "peak RSS of the script's processes" and row.verdict == cmp.OK
    oldest = compare(make_report(steps, rss=300 * MiB), cpu(pss=150 * MiB, rss=310 * MiB))  # before `memory` had it
    assert metric(oldest, "peak_memory").label == "peak RSS" and metric(oldest, "peak_memory").baseline == 300 * MiB
    assert cmp.peak_memory(Report.of(cpu(pss=1000 * MiB, rss=3000 * MiB))) == (1000 * MiB, "peak memory (PSS of the script's processes)")


def test_data_wait_and_p90_are_reported_not_gated():
    result = compare(make_report(noisy(seed=1), data_wait=0.05), make_report(noisy(seed=2), data_wait=0.40))
    wait = metric(result, "data_wait_frac")
    assert not wait.gated and wait.change == pytest.approx(0.35) and wait.note
    assert not metric(result, "step_time_p90").gated and result.exit_code == 0


DL = {"rule": "dataloader-starvation", "code": "DL001", "severity": "high", "title": "GPU waits for data"}
PR = {"rule": "fp32-matmul", "code": "PR001", "severity": "medium", "title": "matmuls in fp32"}


def test_a_new_finding_warns_and_fails_only_when_asked():
    base, cur = make_report(noisy(seed=1), findings=[PR]), make_report(noisy(seed=2), findings=[DL])
    result = compare(base, cur)
    assert [f["code"] for f in result.new_findings] == ["DL001"]
    assert [f["code"] for f in result.resolved_findings] == ["PR001"]
    assert result.exit_code == 0
    assert compare(base, cur, fail_on_new_findings=True).exit_code == 3


# --- compatibility and input ---------------------------------------------------------------

def test_same_script_from_another_checkout():
    assert cmp.same_script("train.py", "/home/runner/work/repo/repo/train.py")
    assert cmp.same_script("./examples/train.py", "examples/train.py")
    assert not cmp.same_script("a/train.py", "b/train.py")
    assert not cmp.same_script("train.py", "train2.py")


@pytest.mark.parametrize("change, message", [
    ({"script": "other.py"}, "different scripts"),
    ({"device": "cuda", "device_name": "NVIDIA H100"}, "different devices"),
])
def test_incompatible_runs_are_refused_unless_forced(change, message):
    base, cur = make_report(noisy(seed=1)), make_report(noisy(seed=2), **change)
    with pytest.raises(cmp.CompareError, match=message):
        compare(base, cur)
    forced = compare(base, cur, force=True)
    assert any(message in w and "--force" in w for w in forced.warnings)


def test_another_gpu_model_is_incompatible_another_cpu_model_is_a_warning():
    gpu = dict(device="cuda", peak_allocated=MiB)
    with pytest.raises(cmp.CompareError, match="different GPU models"):
        compare(make_report(noisy(), device_name="NVIDIA A100", **gpu), make_report(noisy(), device_name="NVIDIA H100", **gpu))
    result = compare(make_report(noisy(), device_name="x86_64"), make_report(noisy(), device_name="aarch64"))
    assert any("different CPU models" in w for w in result.warnings)


def write(tmp_path, name, report) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(report))
    return str(path)


def test_unusable_inputs_are_one_line_errors(tmp_path):
    good = write(tmp_path, "good.json", make_report(noisy()))
    (tmp_path / "junk.json").write_text("{not json")
    cases = {
        str(tmp_path / "missing.json"): "no such run dir or report.json",
        str(tmp_path / "junk.json"): "not a report.json",
        write(tmp_path, "failed.json", make_report(noisy(), status="failed")): "status is 'failed'",
        write(tmp_path, "empty.json", make_report([])): "no measured steps",
        write(tmp_path, "odd.json", {**make_report(noisy()), "steps": [{"index": 0}, "x"]}): "no measured steps",
        write(tmp_path, "v2.json", {**make_report(noisy()), "schema_version": 2}): "schema_version 2",
    }
    for path, message in cases.items():
        with pytest.raises(cmp.CompareError, match=message):
            cmp.load(path, "current")
    report, warnings = cmp.load(str(tmp_path / "v2.json"), "current", force=True)
    assert report.schema_version == 2 and "--force" in warnings[0]  # read typed, as the gate reads it
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write(run_dir, "report.json", make_report(noisy()))
    assert cmp.load(str(run_dir), "baseline")[0].status == "ok"
    assert cmp.load(good, "baseline")[1] == []


def test_parse_percent():
    assert cmp.parse_percent("5%") == pytest.approx(0.05)
    assert cmp.parse_percent("12.5") == pytest.approx(0.125)
    for bad in ("0", "-5%", "abc", "nan"):
        with pytest.raises(ValueError):
            cmp.parse_percent(bad)


# --- the command ---------------------------------------------------------------------------

@pytest.fixture
def pair(tmp_path):
    def make(current_ms=40.0, **current):
        base = write(tmp_path, "base.json", make_report(noisy(seed=1)))
        cur = write(tmp_path, "cur.json", make_report(noisy(current_ms, seed=2), **current))
        return base, cur
    return make


def invoke(*args, env=None):
    return CliRunner().invoke(main, ["compare", *args], env={"GITHUB_STEP_SUMMARY": None, **(env or {})})


def test_cli_exit_codes(pair):
    base, cur = pair()
    ok = invoke(base, cur)
    assert ok.exit_code == 0 and "no regression" in ok.output and "throughput" in ok.output
    base, slow = pair(80.0)
    bad = invoke(base, slow)
    assert bad.exit_code == 3 and "REGRESSION" in bad.output


def test_cli_bad_input_exits_2_with_one_line(pair, tmp_path):
    base, _ = pair()
    for args in ([base, str(tmp_path / "nope.json")], [base, base, "--max-regression", "lots"]):
        result = invoke(*args)
        assert result.exit_code == 2
        assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("advise: error:")
        assert "Traceback" not in result.output
    other = write(tmp_path, "other.json", make_report(noisy(), script="other.py"))
    assert invoke(base, other).exit_code == 2
    forced = invoke(base, other, "--force")
    assert forced.exit_code == 0 and "--force" in forced.output


def test_cli_json_junit_and_step_summary(pair, tmp_path):
    base, slow = pair(80.0, findings=[DL])
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    junit = tmp_path / "junit.xml"
    result = invoke(base, slow, "--json", "--junit", str(junit), env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.exit_code == 3
    data = json.loads(result.stdout)
    assert data["verdict"] == "regression" and data["exit_code"] == 3
    assert data["regressions"] == ["throughput", "step_time_median"]
    assert data["findings"]["new"][0]["code"] == "DL001" and data["alpha"] == 0.01

    text = summary.read_text()
    assert text.startswith("earlier step\n") and "### advise compare: ❌ regression" in text
    assert "| throughput (samples/s) |" in text and "DL001" in text

    suite = ET.parse(junit).getroot()
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert set(cases) == {"throughput", "step_time_median", "step_time_p90", "peak_memory", "data_wait_frac", "findings"}
    assert {n for n, c in cases.items() if c.find("failure") is not None} == {"throughput", "step_time_median"}
    assert suite.get("failures") == "2"


def test_cli_inconclusive_fails_by_default_and_says_why_everywhere(tmp_path):
    base = write(tmp_path, "base.json", make_report([30, 50, 35, 45, 40, 38, 42, 60]))
    cur = write(tmp_path, "cur.json", make_report([35, 55, 40, 52, 47, 44, 48, 62]))  # +16%, the ranks overlap
    junit = tmp_path / "junit.xml"
    result = invoke(base, cur, "--junit", str(junit))
    assert result.exit_code == 4 and "advise compare INCONCLUSIVE" in result.output
    assert "inconclusive: throughput (samples/s), step time median:" in result.output and "exit 4" in result.output
    failures = {c.get("name"): c.find("failure") for c in ET.parse(junit).getroot().iter("testcase")}
    assert failures["step_time_median"] is not None and failures["step_time_median"].get("type") == "inconclusive"
    md = invoke(base, cur, "--format", "markdown")
    assert md.exit_code == 4 and md.output.startswith("### advise compare: ❓ inconclusive")
    chosen = invoke(base, cur, "--json", "--inconclusive", "pass", "--junit", str(junit))
    data = json.loads(chosen.stdout)
    assert chosen.exit_code == 0 and data["verdict"] == "inconclusive" and data["exit_code"] == 0
    assert data["inconclusive"]["policy"] == "pass" and "cannot tell" in data["inconclusive"]["why"][0]
    skipped = [c for c in ET.parse(junit).getroot().iter("testcase") if c.find("skipped") is not None]
    assert skipped and not any(c.find("failure") is not None for c in ET.parse(junit).getroot().iter("testcase"))


def test_cli_markdown_and_fail_on_new_findings(pair):
    base, cur = pair(findings=[DL])
    md = invoke(base, cur, "--format", "markdown")
    assert md.exit_code == 0 and md.output.startswith("### advise compare: ✅ no regression")
    assert "**New findings**" in md.output
    strict = invoke(base, cur, "--fail-on-new-findings")
    assert strict.exit_code == 3 and "new finding" in strict.output


def test_profile_with_a_bad_baseline_fails_before_running(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    result = CliRunner().invoke(main, ["profile", "--baseline", str(tmp_path / "none.json"),
                                       "--out", str(tmp_path / "run"), str(script)])
    assert result.exit_code == 2 and "baseline" in result.stderr and "no such run dir or report.json" in result.stderr
    assert not (tmp_path / "run").exists()
