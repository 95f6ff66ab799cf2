"""advisor.analysis.steptime: the step frame's one reader. Its accessors on a frame the probe's own
writer made (steps.csv, read back as Profile reads it), and a scan of the product source that no
other module reads a step's field by name."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from advisor import overrides as vocabulary
from advisor.analysis import steptime
from advisor.probe.job_shapes import write_steps_csv as _write_steps_csv
from advisor.run_dir.protocol import STEP_COLUMNS, ArmStepLine, Phase, StepLine

ROOT = Path(__file__).resolve().parents[1]
NAN = float("nan")


def _line(i: int, *, duration: float, wait: float = 0.0, samples: int | None = 8, profiled: bool = False) -> StepLine:
    return StepLine(phase=Phase.MEASURE, index=i,
                    t_start=10.0 + i, t_end=10.0 + i + duration, duration_s=duration, host_s=duration, cpu_s=duration,
                    clock="host", data_wait_s=wait, optimizer_s=0.001 * i, samples=samples, profiled=profiled)


def _csv(tmp_path: Path, lines: list[StepLine], losses: list | None = None) -> pd.DataFrame:
    """The steps as the runner writes steps.csv and Profile reads it back (pd.read_csv)."""
    path = tmp_path / "steps.csv"
    _write_steps_csv(path, lines, losses or [])
    return pd.read_csv(path)


@pytest.fixture
def steps(tmp_path) -> pd.DataFrame:
    # step 2's batch unknown (the CSV then reads the column as floats), steps 3-4 under the profiler
    lines = [_line(0, duration=0.10, wait=0.02), _line(1, duration=0.12, wait=0.0), _line(2, duration=0.11, samples=None),
             _line(3, duration=0.30, profiled=True), _line(4, duration=0.31, profiled=True)]
    return _csv(tmp_path, lines, losses=[2.0, 1.9, NAN, 1.8, 1.7])


def test_the_columns_are_the_protocols_and_the_writers():
    for name in (steptime.INDEX, steptime.T_START, steptime.T_END, steptime.DURATION, steptime.HOST, steptime.CPU,
                 steptime.CLOCK, steptime.DATA_WAIT, steptime.OPTIMIZER, steptime.BACKWARD, steptime.SAMPLES,
                 steptime.PROFILED, steptime.SOURCE):
        assert name in STEP_COLUMNS
    assert {steptime.LOSS, steptime.LOSS_FINITE} <= set(ArmStepLine.__struct_fields__)
    with pytest.raises(ImportError, match="not a step column"):
        steptime._columns("duration")


def test_the_accessors_on_a_frame_the_probe_wrote(steps):
    assert steps[steptime.SAMPLES].dtype == float  # the gap turns the column to floats: what the accessors face
    assert steptime.durations(steps).tolist() == pytest.approx([0.10, 0.12, 0.11, 0.30, 0.31])
    assert steptime.durations(steps).dtype == float and steptime.has_durations(steps)
    assert steptime.data_wait(steps).tolist() == pytest.approx([0.02, 0.0, 0.0, 0.0, 0.0])
    assert steptime.has_data_wait(steps) and steptime.has_optimizer_time(steps)
    assert steptime.optimizer_time(steps).tolist() == pytest.approx([0.0, 0.001, 0.002, 0.003, 0.004])
    sizes = steptime.batch_sizes(steps)
    assert sizes.iloc[[0, 1, 3, 4]].tolist() == [8.0] * 4 and math.isnan(sizes.iloc[2])
    assert not steptime.knows_batch(steps)  # one unknown batch: no samples/s
    assert steptime.knows_batch(steps.drop(index=2)) and not steptime.knows_batch(steps.iloc[:0])
    assert steptime.profiled(steps).tolist() == [False, False, False, True, True]
    assert steptime.unprofiled(steps).tolist() == [True, True, True, False, False]
    assert steptime.profiled(steps).dtype == bool and steptime.unprofiled(steps).dtype == bool
    assert not steptime.never_profiled(steps)
    assert steptime.never_profiled(steps.iloc[:3]) and not steptime.never_profiled(steps.iloc[:0])
    assert steptime.has_spans(steps) and steptime.starts(steps).iloc[1] == 11.0
    # a gap longer than a step (0.9 s after step 0) starts a new window
    assert steptime.windows(steps.iloc[:2]) == [(10.0, pytest.approx(10.1)), (11.0, pytest.approx(11.12))]
    loss = steptime.losses(steps)
    assert loss.iloc[[0, 1, 3, 4]].tolist() == [2.0, 1.9, 1.8, 1.7] and math.isnan(loss.iloc[2])
    assert steptime.loss_finite(steps).astype(bool).tolist() == [True, True, False, True, True]  # NaN, told from unseen


def test_a_device_timed_windows_steps_lie_where_the_device_ran_them():
    """Two arm windows' frames (each indexed from 0, as the rounds keep them), queued by Python well
    ahead of the device: each window is found on the device's spans, with its own steps."""
    one = pd.DataFrame({"t_start": [10.0, 10.01], "t_end": [10.01, 10.02], "duration_s": [0.1, 0.1],
                        "t_device_end": [10.1, 10.2], "samples": [8, 8]})
    two = one.assign(t_start=one["t_start"] + 5, t_end=one["t_end"] + 5, t_device_end=one["t_device_end"] + 5,
                     samples=[16, 16])
    start, end = steptime.work_spans(one)
    assert start.tolist() == pytest.approx([10.0, 10.1]) and end.tolist() == pytest.approx([10.1, 10.2])
    found = steptime.window_steps(pd.concat([two, one]))
    assert [(a, b) for a, b, _ in found] == [pytest.approx((10.0, 10.2)), pytest.approx((15.0, 15.2))]
    assert [rows["samples"].tolist() for _, _, rows in found] == [[8, 8], [16, 16]]
    host = one.assign(t_device_end=float("nan"))  # a step the host timed keeps the host's span
    assert steptime.windows(host) == [(10.0, pytest.approx(10.02))]


def test_a_loss_never_seen_is_not_written_as_a_non_finite_one(tmp_path):
    steps = _csv(tmp_path, [_line(i, duration=0.1) for i in range(3)], losses=[2.0, NAN])  # step 2's loss unseen
    assert steptime.loss_finite(steps).astype(bool).tolist() == [True, False]  # nothing said of step 2


def test_the_figures_read_through_the_accessors(steps):
    timed, basis = steptime.timed_steps(steps)
    assert basis == "unprofiled" and timed[steptime.INDEX].tolist() == [0, 1, 2]
    tp = steptime.throughput(steps)
    assert tp["samples_per_s"] is None and tp["steps_per_s"] == pytest.approx(3 / 0.33)
    assert steptime.median_step(steps) == pytest.approx(0.12)
    assert steptime.pace(steps) == pytest.approx(0.11)  # the profiled steps (0.30, 0.31 s) left out
    assert steptime.share(timed, steptime.DATA_WAIT) == pytest.approx(0.02 / 0.33)
    assert steptime.seconds_per_sample(timed) is None  # step 2's batch unknown
    assert steptime.seconds_per_sample(timed.iloc[:2]).tolist() == pytest.approx([0.10 / 8, 0.12 / 8])


def test_a_frame_without_a_column_reads_as_unknown(steps):
    bare = steps.drop(columns=[steptime.DATA_WAIT, steptime.OPTIMIZER, steptime.SAMPLES, steptime.PROFILED,
                               steptime.LOSS, steptime.LOSS_FINITE])
    assert not steptime.has_data_wait(bare) and steptime.data_wait(bare).tolist() == [0.0] * 5
    assert not steptime.has_optimizer_time(bare) and steptime.optimizer_time(bare).tolist() == [0.0] * 5
    assert steptime.batch_sizes(bare).isna().all() and not steptime.knows_batch(bare)
    assert steptime.seconds_per_sample(bare) is None
    # nothing says which steps the profiler saw: none is profiled, and none is known clean either
    assert not steptime.profiled(bare).any() and not steptime.unprofiled(bare).any()
    assert not steptime.never_profiled(bare)
    assert steptime.timed_steps(bare)[1] == "all"
    assert steptime.losses(bare).isna().all() and steptime.loss_finite(bare).empty
    untimed = steps.drop(columns=[steptime.DURATION, steptime.T_START])
    assert not steptime.has_durations(untimed) and steptime.durations(untimed).isna().all()
    assert not steptime.has_spans(untimed) and steptime.median_step(untimed) is None
    assert steptime.durations(pd.DataFrame()).empty and steptime.durations(pd.DataFrame()).dtype == float


def test_report_rows_round_trip(steps):
    rows = steptime.records(steps, ("index", "duration_s", "samples", "profiled"))
    assert rows[0] == {"index": 0, "duration_s": 0.10, "samples": 8, "profiled": False}
    assert type(rows[0]["samples"]) is int and type(rows[0]["index"]) is int and math.isnan(rows[2]["samples"])
    rows[1]["duration_s"], rows[3]["duration_s"] = "n/a", 0.0  # not a number, not positive: left out
    back = steptime.from_rows(rows)
    assert back[steptime.INDEX].tolist() == [0, 2, 4] and steptime.durations(back).dtype == float
    assert steptime.from_rows([{"index": 0}]).columns.tolist() == [steptime.DURATION]
    assert steptime.mark_unprofiled(back)[steptime.PROFILED].eq(False).all()


def test_every_part_an_override_names_is_a_step_column():
    """overrides.py is a leaf below the run dir (it imports nothing of advise's), so it names the
    parts its knobs can shorten by value; they must be columns :func:`steptime.share` can read."""
    assert vocabulary.parts({"dataloader": {"num_workers": 8}}) == (steptime.DATA_WAIT,)
    assert vocabulary.parts({"optimizer": {"fused": True}}) == (steptime.OPTIMIZER,)
    parts = set()
    for knob in vocabulary.VOCABULARY.values():
        try:
            parts.add(knob.part({"num_workers": 8, "fused": True}))
        except (AttributeError, TypeError):
            pass
    assert parts - {None} <= set(STEP_COLUMNS)


# --- no other module reads a step's field by name ----------------------------------------------

_FIELDS = ("duration_s", "host_s", "cpu_s", "data_wait_s", "optimizer_s", "backward_s", "samples", "profiled",
           "t_start", "t_end", "loss", "loss_finite", "clock", "t_device_end")
_OWNERS = {"advisor/analysis/steptime.py", "advisor/run_dir/protocol.py"}


def _lookup(name: str) -> re.Pattern:
    q = "[\"']" + re.escape(name) + "[\"']"
    return re.compile("|".join([
        r"\[\s*" + q + r"\s*\]",                    # steps["duration_s"]
        q + r"\s+(?:not\s+)?in\b",                  # "profiled" in steps
        r"\{[^}]*" + q + r"[^}]*\}\s*<=",           # {"t_start", "t_end"} <= set(steps)
        r"\.(?:get|pop|assign|sort_values|dropna|drop|groupby|set_index|filter|rename)\([^)]*" + q,
        r"\b(?:subset|columns|by)\s*=\s*\[?[^\]\n]*" + q,
        r"\.assign\([^)]*\b" + re.escape(name) + r"\s*=",  # .assign(profiled=False)
        r"\b(?:share|_measured)\([^)]*" + q,        # a column passed by name to a figure
    ]))


def _product_sources():
    for path in sorted((ROOT / "advisor").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel not in _OWNERS:
            yield rel, path.read_text().splitlines()


def test_no_product_module_looks_a_step_field_up_by_name():
    """Only steptime (the reader) and the protocol (where the fields are declared) name a step's
    fields in a lookup: a subscript, a membership test, ``.get``/``.assign``/``dropna(subset=...)``,
    a column passed to a figure. Every field of the step frame is checked except `index` and
    `source`: trace frames (``profile.trace_steps``) and a Profile's `meta` dict use those words for
    their own columns and keys. A report.json row (gate/ab.py) is a step too and is read through
    steptime's names as well."""
    hits = [f"{rel}:{i}: {line.strip()}" for rel, lines in _product_sources() for i, line in enumerate(lines, 1)
            for name in _FIELDS if _lookup(name).search(line)]
    assert hits == []


# The modules that may still spell a step's field as a string literal, and why: none of them looks
# a field up in the step frame.
_LITERALS_ALLOWED = {
    # ClosedStep.timing returns StepTimes' keyword arguments (`line(**step.timing(...))`): msgspec checks
    # each key against the protocol when the line is built; the probe's child imports no pandas.
    "advisor/probe/clock.py": {"duration_s", "data_wait_s", "optimizer_s"},
    # a leaf under the run dir (imports nothing of advise's): a knob's part, pinned to steptime's
    # columns by test_every_part_an_override_names_is_a_step_column
    "advisor/overrides/__init__.py": {"data_wait_s", "optimizer_s"},
    # DL001's evidence key in report.json (a finding's dict), not a lookup
    "advisor/rules/dl001_dataloader_starvation.py": {"data_wait_s"},
}


def test_the_step_fields_literals_live_in_steptime_and_the_protocol():
    """The literal strings '"duration_s"', '"data_wait_s"', '"optimizer_s"', '"profiled"' appear,
    outside steptime and the protocol, only where :data:`_LITERALS_ALLOWED` says why."""
    found = {}
    for rel, lines in _product_sources():
        for name in ("duration_s", "data_wait_s", "optimizer_s", "profiled"):
            if any(re.search("[\"']" + name + "[\"']", line) for line in lines):
                found.setdefault(rel, set()).add(name)
    assert {rel: names - _LITERALS_ALLOWED.get(rel, set()) for rel, names in found.items()
            if names - _LITERALS_ALLOWED.get(rel, set())} == {}
    assert set(found) == set(_LITERALS_ALLOWED), "an allowance no longer needed: drop it"


def test_the_scan_finds_what_it_is_for():
    lines = ['x = steps["duration_s"]', 'if "profiled" in steps:', "ok = {'t_start', 't_end'} <= set(steps)",
             'steps.dropna(subset=["t_start", "t_end"])', 'frame.assign(profiled=False)',
             'steptime.share(timed, "data_wait_s")', 'r.get("samples")']
    assert all(any(_lookup(n).search(line) for n in _FIELDS) for line in lines)
    fine = ['tp["samples_per_s"]', 'evidence = {"data_wait_s": 1.0}', 'trace_steps["index"]', 'samples["t"]',
            'steptime.durations(steps)']
    assert not any(_lookup(n).search(line) for n in _FIELDS for line in fine)


def test_a_bursts_step_is_the_loaders_rhythm_not_a_stall():
    """An 8-worker I/O loader's real steps (tests/data/runs/README.md): 0.5 ms mostly, and every
    eighth a 50 ms wait for the next burst. The step that takes the burst in may spend several ms
    beside its wait (a neighbour lengthens it): it stays in the window's rate with its wait, which a
    fence on the median alone (9.4 ms in this window) left out, reading the window 10% fast. A 500 ms
    stall is still one, and a window's pace is its steps' mean, not the 0.5 ms median."""
    path = ROOT / "tests" / "data" / "runs" / "loader_io_workers_steps" / "workers-8.csv"
    steps = pd.read_csv(path)
    window = steps[~steps["profiled"].astype(bool)].iloc[76:156].reset_index(drop=True)
    assert not steptime.stalled(window).any()
    burst = int(steptime.data_wait(window).idxmax())
    slow = window.copy()
    slow.loc[burst, steptime.DURATION] += 0.012  # its batches taken in over 12 ms more
    assert not steptime.stalled(slow).any()
    dur, _ = steptime.per_step(slow, by_samples=False)
    assert dur.sum() == pytest.approx(steptime.durations(slow).sum())
    assert steptime.pace(slow) == pytest.approx(steptime.durations(slow).mean())
    assert steptime.pace(slow) > 10 * steptime.median_step(slow)
    stall = window.copy()
    stall.loc[5, steptime.DURATION] = 0.5
    assert steptime.stalled(stall).tolist() == [k == 5 for k in range(len(stall))]
    assert steptime.pace(stall) == pytest.approx(steptime.durations(stall).drop(index=5).mean())
