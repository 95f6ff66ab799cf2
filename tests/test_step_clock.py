"""What a step's time is, per device: the StepClock on a fake host clock and a fake GPU.

The fake GPU runs each step's work after the host has queued it, so at a boundary its timeline
lags the host's (a launch-bound host, a compute-bound device): the case where a host timestamp
read 13 ms for a 62 ms step. Every wait on the device (an event's synchronize, a loss's
``.item()``) is counted with the step it happened in, so the tests can say none falls inside a
window.
"""

from __future__ import annotations

import io
import json

import pytest

from advisor.probe.arms import Arms
from advisor.probe.clock import ProbeDone, StepClock
from advisor.probe.timeline import DeviceTimeline, HostTimeline
from advisor.run_dir import layout
from advisor.run_dir.protocol import Phase


class FakeHost:
    """pyinstrument's FakeClock: time moves only when the test says so."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class FakeGPU:
    """One stream: queued work runs back to back once the host has launched it."""

    def __init__(self, host: FakeHost) -> None:
        self.host, self.busy_until, self.waits = host, host.t, []

    def run(self, seconds: float) -> None:
        self.busy_until = max(self.host.t, self.busy_until) + seconds

    def wait(self, until: float, why: str) -> None:
        self.waits.append((why, self.host.t))
        self.host.t = max(self.host.t, until)

    def event(self) -> "FakeEvent":
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, gpu: FakeGPU) -> None:
        self.gpu, self.t = gpu, None

    def record(self) -> None:
        self.t = max(self.gpu.host.t, self.gpu.busy_until)  # when the stream reaches it

    def synchronize(self) -> None:
        self.gpu.wait(self.t, "event")

    def elapsed_time(self, end: "FakeEvent") -> float:
        assert self.gpu.host.t >= end.t, "elapsed_time of an event the device has not reached"
        return (end.t - self.t) * 1000.0


class FakeLoss:
    """A loss on the device: reading it waits for the work queued before it."""

    def __init__(self, gpu: FakeGPU, value: float) -> None:
        self.gpu, self.value, self.ready_at = gpu, value, gpu.busy_until

    def float(self):
        return self

    def mean(self):
        return self

    def item(self) -> float:
        self.gpu.wait(self.ready_at, "loss")
        return self.value


class Opt:
    pass


def _loop(clock: StepClock, host: FakeHost, gpu: FakeGPU | None, steps: int, launch_s: float, gpu_s: float) -> int:
    """The script's loop: launch a step's kernels (host time), the device runs them later."""
    opt, done = Opt(), 0
    try:
        for i in range(steps):
            host.t += launch_s
            if gpu is not None:
                gpu.run(gpu_s)
            clock.backward_done(FakeLoss(gpu, float(i)) if gpu else None, 0.0)
            clock.optimizer_post(opt, None)
            done += 1
    except ProbeDone:
        pass
    return done


def _gpu_clock(**window) -> tuple[StepClock, FakeHost, FakeGPU, io.StringIO]:
    """A StepClock on a fake host clock and a fake GPU whose events it records."""
    host = FakeHost()
    gpu = FakeGPU(host)
    sink = io.StringIO()
    clock = StepClock(sink=sink, timeline=DeviceTimeline(lambda: True, gpu.event, clock=host), **window)
    return clock, host, gpu, sink


def _lines(sink: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in sink.getvalue().splitlines()]


def test_a_gpu_step_is_the_devices_time_between_boundaries_not_the_hosts():
    clock, host, gpu, sink = _gpu_clock(warmup=3, steps=6, profile_steps=0)
    _loop(clock, host, gpu, 50, launch_s=0.013, gpu_s=0.062)
    measured = [r for r in _lines(sink) if r["phase"] == Phase.MEASURE]
    assert len(measured) == 6 and all(r["clock"] == "device" for r in measured)
    assert [round(r["duration_s"], 6) for r in measured] == [0.062] * 6  # the device's step, not the host's 13 ms
    assert all(r["host_s"] == pytest.approx(0.013) for r in measured)  # both clocks kept
    assert sum(r["duration_s"] for r in measured) == pytest.approx(6 * 0.062)


def test_advise_waits_on_the_device_once_per_window_and_never_inside_it():
    clock, host, gpu, sink = _gpu_clock(warmup=3, steps=6, profile_steps=0)
    window_ends_at = []
    clock.on_window_end = lambda: window_ends_at.append(host.t)
    _loop(clock, host, gpu, 50, launch_s=0.013, gpu_s=0.062)
    assert clock.done and len(window_ends_at) == 1
    assert [why for why, _ in gpu.waits] == ["event"]  # one wait, at the window's last boundary
    (_, at), = gpu.waits
    assert at == window_ends_at[0] or at <= window_ends_at[0]
    assert clock.loss_values() == [float(i) for i in range(4, 10)]  # read after the window (the wait is done)
    untimed = [r for r in _lines(sink) if r["phase"] in (Phase.STARTUP, Phase.WARMUP)]
    assert untimed and all(r["clock"] == "host" for r in untimed)  # written at once, no wait for them


def test_the_windows_one_wait_places_its_steps_where_the_device_ran_them():
    """The host queues a 62 ms step in 13 ms, so by the window's last boundary the device is most of
    the window behind: each step's `t_device_end` is when the device passed its end event, on the
    host's clock (the wait returns as the device passes the last one), and the steps lie back to back
    there. The sampler's readings (the GPU's energy counter) are matched to that span."""
    clock, host, gpu, sink = _gpu_clock(warmup=3, steps=6, profile_steps=0)
    _loop(clock, host, gpu, 50, launch_s=0.013, gpu_s=0.062)
    (_, waited_at), = gpu.waits
    lines = _lines(sink)
    measured = [r for r in lines if r["phase"] == Phase.MEASURE]
    assert measured[-1]["t_device_end"] == pytest.approx(host.t) and host.t > waited_at  # the wait's return
    ends = [r["t_device_end"] for r in measured]
    assert [e - r["duration_s"] for e, r in zip(ends[1:], measured[1:])] == pytest.approx(ends[:-1])  # back to back
    assert all(r["t_device_end"] - r["t_end"] > 0.1 for r in measured[2:])  # the device runs well behind the host
    assert ends[-1] - (ends[0] - measured[0]["duration_s"]) == pytest.approx(6 * 0.062)  # the window's device span
    assert all(r["t_device_end"] is None for r in lines if r["phase"] in (Phase.STARTUP, Phase.WARMUP))


@pytest.mark.parametrize("build", ["cpu", "cuda"])
def test_on_a_cpu_the_host_clock_times_the_step_and_lines_are_written_as_steps_end(build):
    """Also with a CUDA build of torch (the one `pip install torch` gives) on a machine without a GPU,
    or a CPU-only script on one: no event, nothing to wait for, each line out as its step ends (they
    were held to the window's end, and `advise ab`'s rounds and the progress saw no step for minutes)."""
    host = FakeHost()
    sink = io.StringIO()
    timeline = HostTimeline(host) if build == "cpu" else DeviceTimeline(lambda: False, FakeGPU(host).event, clock=host)
    clock = StepClock(warmup=2, steps=4, profile_steps=0, sink=sink, timeline=timeline)
    seen = []
    clock.on_boundary = lambda n: seen.append(len(sink.getvalue().splitlines()))
    _loop(clock, host, None, 20, launch_s=0.02, gpu_s=0.0)
    measured = [r for r in _lines(sink) if r["phase"] == Phase.MEASURE]
    assert [r["duration_s"] for r in measured] == pytest.approx([0.02] * 4)
    assert all(r["clock"] == "host" and r["host_s"] == r["duration_s"] and r["t_device_end"] is None for r in measured)
    assert seen == list(range(1, len(seen) + 1))  # each step's line is out before the next step starts


def test_the_profilers_window_and_the_warmup_around_it_on_a_lagging_device():
    events = []
    clock, host, gpu, sink = _gpu_clock(warmup=2, steps=5, profile_steps=2,
                                        on_profile_start=lambda: events.append("start"),
                                        on_profile_step=lambda: events.append("step"))
    _loop(clock, host, gpu, 50, launch_s=0.005, gpu_s=0.030)
    lines = [r for r in _lines(sink) if r["source"] == "optimizer"]  # (the first backward's line came before)
    phases = [r["phase"] for r in lines]
    assert phases == ["startup", "warmup", "warmup", "measure", "measure", "measure", "profiler-warmup", "measure",
                      "measure"]
    assert [r["profiled"] for r in lines if r["phase"] == "measure"] == [False, False, False, True, True]
    assert events == ["start", "step", "step"]
    assert all(r["duration_s"] == pytest.approx(0.030) for r in lines if r["phase"] == "measure")
    assert len(gpu.waits) == 1


def test_a_device_the_script_starts_late_times_its_first_step_on_the_host():
    """No CUDA context before the script makes one: the step it first touches the device in has no
    event at its start, and is timed by the host; the rest by the device."""
    host = FakeHost()
    gpu = FakeGPU(host)
    active = [False]
    sink = io.StringIO()
    clock = StepClock(warmup=0, steps=3, profile_steps=0, sink=sink,
                      timeline=DeviceTimeline(lambda: active[0], gpu.event, clock=host))
    opt = Opt()
    host.t += 0.5  # start-up, on the CPU
    clock.optimizer_post(opt, None)
    active[0] = True
    with pytest.raises(ProbeDone):
        for _ in range(5):
            host.t += 0.001
            gpu.run(0.010)
            clock.optimizer_post(opt, None)
    measured = [r for r in _lines(sink) if r["phase"] == "measure"]
    assert [r["clock"] for r in measured] == ["host", "device", "device"]
    assert [r["duration_s"] for r in measured[1:]] == pytest.approx([0.010, 0.010])


def test_the_arms_hold_a_windows_steps_and_losses_until_it_closes(tmp_path):
    """An arm window's steps are timed on the device and their losses read once it closes: one wait
    per window, none between its steps (a loss read per step made each arm time Python's launches)."""
    host = FakeHost()
    gpu = FakeGPU(host)
    names = layout.names("")
    sink = open(tmp_path / names.steps_jsonl, "a")
    plan = {"round": 0, "windows": [{"arm": "baseline", "overrides": {}, "warmup": 2, "steps": 4},
                                    {"arm": "baseline", "overrides": {}, "warmup": 1, "steps": 3}]}
    (tmp_path / names.plan).write_text(json.dumps(plan))
    timeline = DeviceTimeline(lambda: True, gpu.event, clock=host)
    arms = Arms(tmp_path, names, sink, plan_timeout_s=0.05, write_probe=lambda: None)
    arms.timeline = timeline
    clock = StepClock(warmup=1, steps=2, profile_steps=0, sink=sink, timeline=timeline, arms=arms)
    boundaries_at_wait = []
    original = gpu.wait
    gpu.wait = lambda until, why: (boundaries_at_wait.append((why, len(arm_steps(sink)), until > host.t)),
                                   original(until, why))
    _loop(clock, host, gpu, 40, launch_s=0.004, gpu_s=0.020)
    sink.close()
    lines = arm_steps(sink)
    assert [(r["window"], r["warm"]) for r in lines] == [(0, True)] * 2 + [(0, False)] * 4 + [(1, True)] + [(1, False)] * 3
    timed = [r for r in lines if not r["warm"]]
    assert all(r["clock"] == "device" and r["duration_s"] == pytest.approx(0.020) for r in timed)
    assert all(r["host_s"] == pytest.approx(0.004) for r in timed)
    for window in (0, 1):  # each window's steps placed on the host's clock by its own wait
        ends = [r["t_device_end"] for r in timed if r["window"] == window]
        assert [b - a for a, b in zip(ends, ends[1:])] == pytest.approx([0.020] * (len(ends) - 1))
    assert all(r["t_device_end"] is None for r in lines if r["warm"])
    assert [r["loss"] for r in lines] == [float(i) for i in range(4, 4 + len(lines))]
    # the waits: the profiled window's end, then each arm window's end (its losses read after it)
    blocking = [(why, n) for why, n, blocked in boundaries_at_wait if blocked]
    assert blocking == [("event", 0), ("event", 0), ("event", 6)]  # each loss read after them waited for nothing


def arm_steps(sink) -> list[dict]:
    if not sink.closed:
        sink.flush()
    with open(sink.name) as f:
        return [r for r in map(json.loads, f) if r["phase"] == "arm"]


class PoisonedGPU(FakeGPU):
    """A context the script's CUDA error poisoned (a device-side assert): every wait on it raises."""

    poisoned = False

    def wait(self, until: float, why: str) -> None:
        if self.poisoned:
            raise RuntimeError("CUDA error: device-side assert triggered")
        super().wait(until, why)


def test_a_device_the_scripts_error_poisoned_leaves_its_steps_on_the_hosts_clock():
    """The script raised inside the window and its error poisoned the device: the window's one wait
    raises too. The steps held for it keep their host times, their losses read as unknown, and no
    error but the script's leaves the probe (end to end: test_probe_e2e, poisoned_device.py)."""
    host = FakeHost()
    gpu, sink = PoisonedGPU(host), io.StringIO()
    clock = StepClock(warmup=2, steps=6, profile_steps=0, sink=sink, timeline=DeviceTimeline(lambda: True, gpu.event, clock=host))
    _loop(clock, host, gpu, 5, launch_s=0.01, gpu_s=0.03)
    assert all(r["phase"] != Phase.MEASURE for r in _lines(sink))  # held for the window's wait
    gpu.poisoned = True
    clock.flush()
    measured = [r for r in _lines(sink) if r["phase"] == Phase.MEASURE]
    assert [(r["clock"], r["duration_s"]) for r in measured] == [("host", pytest.approx(0.01))] * 2
    assert clock.loss_values() == [None, None] and not gpu.waits


def test_a_duet_turn_hands_over_an_idle_device(tmp_path):
    """A duet's side says its turn is over (PlanDone) only after its window's one wait: the device
    has run every kernel the side queued, so the other side's first step does not share the GPU
    with this side's last (advisor/gate/duet.py hands over on that line)."""
    host = FakeHost()
    gpu = FakeGPU(host)
    names = layout.names("")
    idle_at_plan_done = []

    class Sink(io.StringIO):
        def write(self, text: str) -> int:
            if '"plan-done"' in text:
                idle_at_plan_done.append(gpu.busy_until <= host.t)
            return super().write(text)

    plan = {"round": 0, "windows": [{"arm": "baseline", "overrides": {}, "warmup": 1, "steps": 5}]}
    (tmp_path / names.plan).write_text(json.dumps(plan))
    timeline = DeviceTimeline(lambda: True, gpu.event, clock=host)
    arms = Arms(tmp_path, names, Sink(), plan_timeout_s=0.05, write_probe=lambda: None)
    arms.timeline = timeline
    clock = StepClock(warmup=1, steps=2, profile_steps=0, sink=arms.sink, timeline=timeline, arms=arms)
    _loop(clock, host, gpu, 40, launch_s=0.002, gpu_s=0.030)  # the host runs far ahead of the device
    assert idle_at_plan_done == [True]
