"""The kernel's wait clock (advisor.waits) on an injected /proc, and the windows it sets aside
(advisor.experiments.inprocess.disturbed) on recorded rounds."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from advisor.experiments.arms import RoundResult
from advisor.experiments.inprocess import disturbed, read_neighbours
from advisor.run_dir.protocol import ArmLine
from advisor.waits import WaitClock


def fake_proc(root: Path, threads: dict[int, dict[int, int]], pressure_us: int | None = 5_000_000,
              steal_ticks: int = 300) -> Path:
    """A /proc of `threads` ({pid: {tid: run-queue wait, ns}}), PSI and a /proc/stat."""
    for pid, tids in threads.items():
        task = root / str(pid) / "task"
        task.mkdir(parents=True, exist_ok=True)
        for old in task.iterdir():
            if int(old.name) not in tids:
                (old / "schedstat").unlink()
                old.rmdir()
        for tid, wait in tids.items():
            (task / str(tid)).mkdir(exist_ok=True)
            (task / str(tid) / "schedstat").write_text(f"123456 {wait} 7\n")
        (root / str(pid) / "schedstat").write_text("1 2 3\n")
    if pressure_us is not None:
        (root / "pressure").mkdir(exist_ok=True)
        (root / "pressure" / "cpu").write_text(f"some avg10=0.00 avg60=0.00 avg300=0.00 total={pressure_us}\n"
                                               "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    (root / "stat").write_text(f"cpu  100 0 50 1000 10 0 1 {steal_ticks} 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    return root


def test_the_tree_wait_counts_each_thread_from_its_first_reading_and_keeps_what_an_exited_one_waited(tmp_path):
    clock = WaitClock(fake_proc(tmp_path, {10: {10: 5_000_000_000, 11: 1_000_000_000}}))
    first = clock.read([10])
    assert first["runq_wait_s"] == 0.0  # the clock starts at its first reading
    assert first["cpu_pressure_s"] == 5.0 and first["steal_s"] == pytest.approx(300 / os.sysconf("SC_CLK_TCK"))
    # thread 11 waits 0.5 s more, then exits; a worker (pid 20) is born and waits 0.25 s
    fake_proc(tmp_path, {10: {10: 5_100_000_000, 11: 1_500_000_000}, 20: {20: 250_000_000}})
    second = clock.read([10, 20], main=10)
    assert second["runq_wait_s"] == pytest.approx(0.1 + 0.5 + 0.25)
    assert second["main_runq_wait_s"] == pytest.approx(0.1 + 0.5)  # the main process's part; the worker's is the rest
    fake_proc(tmp_path, {10: {10: 5_200_000_000}, 20: {20: 250_000_000}})
    assert clock.tree_wait_s([10, 20]) == pytest.approx(0.95)  # 11's wait stays counted
    assert clock.missing(10) == []


def test_a_kernel_without_the_clock_reads_none_and_says_what_it_lacks(tmp_path):
    (tmp_path / "stat").write_text("intr 0\n")
    clock = WaitClock(tmp_path)
    reading = clock.read([10])
    assert all(math.isnan(v) for v in reading.values())
    assert clock.missing(10) == ["per-thread run-queue wait (/proc/PID/task/*/schedstat)", "CPU pressure (/proc/pressure/cpu)"]


def test_the_clock_reads_this_machines_own_threads():
    clock = WaitClock()
    clock.read([os.getpid()])
    sum(i * i for i in range(200_000))
    reading = clock.read([os.getpid()])
    assert reading["runq_wait_s"] >= 0.0 and reading["cpu_pressure_s"] > 0.0, reading


def _round(windows: list[tuple[str, float, float | None]]) -> RoundResult:
    """A round of (arm, cores other processes used, the script's run-queue wait in cores) windows."""
    result = RoundResult([ArmLine(round=0, window=k, arm=arm) for k, (arm, _, _) in enumerate(windows)], {})
    for k, (_, other, wait) in enumerate(windows):
        result.outside[k] = other
        if wait is not None:
            result.waits[k] = wait
    return result


def test_a_window_is_set_aside_where_a_neighbour_made_the_script_wait_not_where_it_only_ran():
    rounds = [_round([("baseline", 0.1, 0.02), ("a1", 0.1, 0.03), ("baseline", 1.2, 0.40), ("a1", 0.9, 0.04),
                      ("baseline", 0.8, 0.03)])]
    disturbed(rounds, cpu_count=2)
    assert set(rounds[0].busy) == {2}  # the baseline the neighbour slowed; the others it did not reach


def test_an_arm_that_oversubscribes_the_cores_waits_on_itself_and_is_not_set_aside():
    quiet_crowded = [("baseline", 0.1, 0.02), ("w8", 0.1, 0.50), ("baseline", 0.1, 0.02)]
    rounds = [_round(quiet_crowded), _round([("w8", 0.7, 0.52), ("baseline", 0.1, 0.02)])]
    disturbed(rounds, cpu_count=2)
    assert rounds[0].busy == {} and rounds[1].busy == {}
    # its first window alone, beside a neighbour: set aside (nothing says the wait is its own) ...
    first = [_round([("baseline", 0.1, 0.02), ("w8", 0.7, 0.52), ("baseline", 0.1, 0.02)])]
    disturbed(first, cpu_count=2)
    assert set(first[0].busy) == {1}
    # ... then its quiet window, measured again, says it is: the mark is taken back
    first.append(_round(quiet_crowded))
    disturbed(first, cpu_count=2)
    assert first[0].busy == {}


def test_without_the_clock_the_samplers_load_alone_sets_a_window_aside():
    rounds = [_round([("baseline", 0.1, None), ("a1", 0.6, None), ("baseline", 0.4, None)])]
    disturbed(rounds, cpu_count=2)
    assert set(rounds[0].busy) == {1}


RUNS = Path(__file__).parent / "data" / "runs"


def test_an_oversubscribed_trees_stalled_steps_set_its_windows_aside_though_their_wait_did_not_rise():
    """Recorded beside a CPU burner (on 1-4 s, off 0-3 s): loader-cpu-workers, 2 workers and 2 intra-op
    threads on 2 cores, its first two rounds' windows and the sampler's clock. The first round's three
    baseline windows ran 89-129 ms a step (stalls of up to 270 ms) where the script's quiet steps take
    28-30 ms, yet their trees waited 1.25-1.34 cores over each window, less than in the quiet baseline
    window after them: on the windows' wait alone they were kept, and DL003's 1 worker and 1 thread read
    4.8x faster, verified, where by hand beside the same burner read 1.68x. The steps' own clock (each
    against the window's quietest) says which steps the burner held."""
    import pandas as pd

    from advisor.analysis import metrics
    from advisor.probe.job_shapes import RankLines

    run = RUNS / "loader_cpu_workers_arms_beside_a_burner"
    lines = RankLines(run / "steps.jsonl", run / "arms.jsonl")
    lines.read()
    samples = pd.read_csv(run / "samples.csv")
    first, second = RoundResult.read(lines, 0), RoundResult.read(lines, 1)
    read_neighbours(first, [], samples, cpu_count=2)
    read_neighbours(second, [first], samples, cpu_count=2)
    stalled = [line.window for line in first.windows if line.arm == "baseline"]
    [quiet] = [line.window for line in second.windows if line.arm == "baseline"]
    assert len(stalled) == 3 and all(first.steps[k]["duration_s"].mean() > 0.08 for k in stalled)
    assert all(first.outside[k] >= metrics.OUTSIDE_LOAD_WARN_CORES and first.waits[k] < second.waits[quiet] for k in stalled)
    assert set(stalled) <= set(first.busy)
    assert quiet in second.quiet and second.judged(quiet)["duration_s"].mean() < 0.035
    for result in (first, second):  # a window is kept whole only where no step of it was held
        for line in result.windows:
            held = bool(metrics.disturbed_steps(result.steps[line.window], samples, 2).any())
            assert (line.window in result.busy or line.window in result.quiet) == held, line
    # on the windows' wait alone (the steps' clock left out), the stalled baselines were kept
    first.held.clear()
    second.held.clear()
    disturbed([first, second], cpu_count=2)
    assert not set(stalled) & set(first.busy)
