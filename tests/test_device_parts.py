"""`advise analyze` of a GPU trace splits each step on the device's timeline, not the host's.

On a GPU the host runs ahead: ResNet-50's single-tensor SGD (kineto's tb_plugin sample, V100)
spends 16% of each ProfilerStep inside ``Optimizer.step`` on the host, most of it blocked on a
full launch queue while the backward pass's kernels drain; its 483 kernels take 1% of the
device. The optimizer's share here is recomputed straight from the trace's JSON (the kernels its
launches started, through their correlation ids, and the device's idle time while the host was
in the optimizer), and the data wait is checked against tb_plugin's own expected output.
"""

from __future__ import annotations

import gzip
import json

import pytest

from advisor.analysis import metrics, steptime
from advisor.engine import Settings, run_rules
from advisor.profile import Profile
from advisor.rules.registry import load_rules
from conftest import trace_path

NW0 = "kineto/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
NW4 = "kineto/resnet50_num_workers_4/worker0.1623212756351.pt.trace.json.gz"
CPU_ONLY = "hta/history/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
DEVICE_EVENTS = ("Kernel", "Memcpy", "Memset", "kernel", "gpu_memcpy", "gpu_memset")


def _events(relative: str) -> list[dict]:
    path = trace_path(relative)
    with (gzip.open(path, "rt") if path.suffix == ".gz" else open(path)) as fh:
        return [e for e in json.load(fh)["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]


def _named(events, prefix):
    return [e for e in events if e["name"].startswith(prefix) and e.get("cat") in ("Operator", "user_annotation")]


def _overlap(a0, a1, intervals) -> float:
    return sum(max(0.0, min(a1, b1) - max(a0, b0)) for b0, b1 in intervals)


def raw_shares(relative: str) -> tuple[float, float]:
    """(the optimizer's share on the device, its share on the host), from the JSON alone.

    Device: the time the device runs what Optimizer.step launched (its kernels and copies, each
    found through its launch's correlation id) plus the device's idle time while the host is in
    Optimizer.step, over the steps' device time: from the first ProfilerStep's start to the end of
    the last device event launched inside a ProfilerStep. Host: the Optimizer.step ranges over the
    ProfilerStep ranges."""
    events = _events(relative)
    steps, ranges = _named(events, "ProfilerStep#"), _named(events, "Optimizer.step")
    launch = {e["args"]["correlation"]: e for e in events
              if e.get("cat") in ("Runtime", "cuda_runtime") and "correlation" in e.get("args", {})}
    device = sorted((e for e in events if e.get("cat") in DEVICE_EVENTS), key=lambda e: e["ts"])

    def launched_in(e, spans) -> bool:
        call = launch.get(e["args"].get("correlation"))
        return call is not None and any(s["ts"] <= call["ts"] < s["ts"] + s["dur"] and s["tid"] == call["tid"]
                                        for s in spans)

    busy: list[list[float]] = []  # the device's busy intervals, merged
    for e in device:
        if busy and e["ts"] <= busy[-1][1]:
            busy[-1][1] = max(busy[-1][1], e["ts"] + e["dur"])
        else:
            busy.append([e["ts"], e["ts"] + e["dur"]])
    optimizer_busy = sum(e["dur"] for e in device if launched_in(e, ranges))  # one stream: no overlap
    waiting = sum(r["dur"] - _overlap(r["ts"], r["ts"] + r["dur"], busy) for r in ranges)
    first = min(s["ts"] for s in steps)
    last = max([s["ts"] + s["dur"] for s in steps] + [e["ts"] + e["dur"] for e in device if launched_in(e, steps)])
    host = sum(r["dur"] for r in ranges) / sum(s["dur"] for s in steps)
    return (optimizer_busy + waiting) / (last - first), host


def test_a_gpu_steps_optimizer_share_is_the_devices_not_the_host_range():
    device, host = raw_shares(NW4)
    profile = Profile.from_trace(trace_path(NW4))
    share = metrics.breakdown(profile.steps)["optimizer_frac"]
    assert profile.parts_on_device
    assert share == pytest.approx(device, rel=0.02)
    assert host > 0.15 and share < host / 5  # 16% of the host's step, under 2% of the device's


def test_opt001_estimates_from_the_device_share():
    profile = Profile.from_trace(trace_path(NW4))
    device, host = raw_shares(NW4)
    (finding,), _ = run_rules(profile, Settings(select=["OPT001"]), load_rules())
    f = finding.to_dict()
    assert f["evidence"]["implementation"] == "single-tensor"
    assert f["evidence"]["optimizer_frac"] == pytest.approx(device, abs=0.001)
    assert f["estimated_gain_frac"] == pytest.approx(0.7 * device, abs=0.001)  # 1.3%, not 0.7 x 16% = 11%
    assert f["estimated_gain_frac"] < 0.7 * host / 5


@pytest.mark.parametrize("trace, tb_plugin", [(NW0, 0.3337), (NW4, 0.0084)])
def test_data_wait_is_the_devices_idle_time_in_the_loader_as_tb_plugin_reads_it(trace, tb_plugin):
    """tb_plugin's overview (its expected output, kineto/tb_plugin_expected): 'DataLoader' is the
    step's time with no kernel, copy or runtime call running while the host is in the loader."""
    steps = Profile.from_trace(trace_path(trace)).steps
    assert metrics.breakdown(steps)["data_wait_frac"] == pytest.approx(tb_plugin, abs=0.005)


def test_a_cpu_trace_keeps_its_host_ranges():
    events = _events(CPU_ONLY)
    steps = _named(events, "ProfilerStep#")
    host = sum(r["dur"] for r in _named(events, "Optimizer.step")) / sum(s["dur"] for s in steps)
    profile = Profile.from_trace(trace_path(CPU_ONLY))
    assert not profile.parts_on_device and set(steptime.durations(profile.steps) > 0) == {True}
    assert metrics.breakdown(profile.steps)["optimizer_frac"] == pytest.approx(host, rel=1e-6)


# --------------------------------------------------------------------------- a closure, by hand


def _x(cat, name, ts, dur, args=None, pid=1, tid=1):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args or {}}


def _closure_trace(tmp_path, correlated: bool = True):
    """One step, shaped like a real LBFGS step on a GPU: the loader (device idle), a forward kernel,
    then Optimizer.step whose closure runs a backward op (its kernel runs until 80), then two
    optimizer kernels, the last after the host has left the range.

    host   step [0, 100)  loader [0, 20)  Optimizer.step [50, 98), closure's backward op [52, 60)
    device forward [25, 45)  closure's kernel [60, 80)  optimizer [85, 90), [100, 110)
    """
    gpu = {"device": 0, "stream": 7}

    def kernel(name, ts, dur, corr):
        return _x("kernel", name, ts, dur, {**gpu, **({"correlation": corr} if correlated else {})}, pid=0, tid=7)

    events = [
        _x("user_annotation", "ProfilerStep#1", 0, 100),
        _x("user_annotation", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 20),
        _x("cuda_runtime", "cudaLaunchKernel", 20, 2, {"correlation": 1}),
        _x("user_annotation", "Optimizer.step#LBFGS.step", 50, 48),
        _x("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 52, 8),
        _x("cuda_runtime", "cudaLaunchKernel", 55, 2, {"correlation": 2}),
        _x("cuda_runtime", "cudaLaunchKernel", 80, 2, {"correlation": 3}),
        _x("cuda_runtime", "cudaLaunchKernel", 92, 2, {"correlation": 4}),
        kernel("forward", 25, 20, 1), kernel("closure_backward", 60, 20, 2),
        kernel("lbfgs_update", 85, 5, 3), kernel("lbfgs_update", 100, 10, 4),
    ]
    path = tmp_path / ("closure.json" if correlated else "uncorrelated.json")
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return Profile.from_trace(path)


def test_a_closures_kernels_are_the_models_and_the_devices_idle_time_is_split(tmp_path):
    steps = _closure_trace(tmp_path).steps
    assert steptime.durations(steps).tolist() == [pytest.approx(110e-6)]  # ends with the last kernel
    assert steptime.data_wait(steps).tolist() == [pytest.approx(20e-6)]  # idle [0, 20) in the loader
    # the optimizer's kernels (5 + 10) and the device idle while the host is past the closure:
    # [80, 85) and [90, 98); the closure's kernel [60, 80) is backward
    assert steptime.optimizer_time(steps).tolist() == [pytest.approx(28e-6)]


def test_without_correlation_ids_the_optimizer_falls_back_to_the_host_range(tmp_path):
    steps = _closure_trace(tmp_path, correlated=False).steps
    assert steptime.data_wait(steps).tolist() == [pytest.approx(20e-6)]
    assert steptime.optimizer_time(steps).tolist() == [pytest.approx(38e-6)]  # [50, 98) less the closure [50, 60)
