"""The Profile: the one object every later stage (rules, experiments, reports) reads.

Built from a probe's run dir (:meth:`Profile.from_run_dir`) or from any Kineto trace a user
already has (:meth:`Profile.from_trace`), so GPU rules are tested on recorded GPU traces.

Frames (pandas; times in seconds unless the column says ``_us``):

- ``steps``: one row per measured step, the columns of ``protocol.STEP_COLUMNS``: ``index``,
  ``duration_s`` (on the step's ``clock``: the device's on a GPU, see
  :mod:`advisor.probe.timeline`), ``host_s`` (the host's), ``cpu_s`` (the training process's
  CPU time over the step; NaN from a trace), ``data_wait_s`` (time in
  DataLoader ``__next__``), ``optimizer_s`` (host time in ``optimizer.step``), ``backward_s``
  (host time in ``backward()``), ``samples`` (batch size; NaN when unknown), ``profiled``
  (the step ran under torch.profiler, so its time is inflated), ``loss`` (NaN when unseen).
  From a trace alone: one row per ``ProfilerStep#N`` with ``gpu_busy_s`` too, its data wait and
  optimizer time read on the device's timeline when the trace has GPU work (``meta["step_parts"]``).
- ``ops``, ``kernels``, ``memcpy``, ``runtime``, ``annotations``, ``python``, ``memory``,
  ``trace_steps``: the trace's frames (see :mod:`advisor.trace`); empty without a trace.
- ``samples``: the parent's sampler ticks (see :mod:`advisor.probe.sampler`).

``sources``: the user's lines behind host syncs, matmuls, copies and DataLoader fetches (the
probe's ``sources.json``, else the trace's ``python_function`` events; see :mod:`advisor.analysis.sources`),
read through :meth:`Profile.locations`.

Typed, read once from probe.json (:mod:`advisor.run_dir.seen`; a rule reads their attributes):
``env`` (:class:`~advisor.run_dir.seen.Env`: python, torch, cuda, device, device_name,
device_capability, device_memory_bytes, cpu_count, backend flags, rank...), ``observed``
(:class:`~advisor.run_dir.seen.Observed`: the optimizers and DataLoaders the script built),
``memory`` (:class:`~advisor.run_dir.seen.MemoryAccount`: the window's peak, the budget, the
tensors). A Profile built by hand may pass them as dicts: they are read once, when it is made.
``meta`` (:class:`ProfileMeta`): where the figures came from (probe, trace or a rank's summary), what
ended each step, the trace's file, the notes said once in the warnings, ``log_tail`` (the last lines of
the script's log); a dict passed by hand is read once too.

A multi-rank job: ``ranks`` lists every rank's Profile (ordered by rank; this one is one of
them, normally rank 0) and :attr:`Profile.job` wraps them in a :class:`~advisor.analysis.ranks.JobProfile`
for the cross-rank rules; a single-rank run has ``ranks == []`` and a job of one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable, Hashable, Literal, TypeVar
from pathlib import Path

import pandas as pd

from .analysis import sources as source_sites, steptime
from .run_dir import layout
from .run_dir.chatter import without_chatter
from .run_dir.protocol import ChildAccount, read_account
from .run_dir.seen import Env, MemoryAccount, Observed, Sources
from .model import SourceLocation
from .analysis.ranks import JobProfile
from .trace import TraceError, TraceFrames, load_trace
from .trace.device_parts import optimizer_ranges

T = TypeVar("T")  # what a Profile's derived table is

LOG_TAIL_LINES = 30  # meta.log_tail: what a failed run's report shows of the script's log


# steps-quiet.csv's reason, said wherever the Profile is read (the report's warnings, advise analyze)
QUIET_STEPS_NOTE = ("a neighbour disturbed the measured window (other processes took a core and the script's threads "
                    "waited for one): step times and their shares are read on {steps} steps of a quiet window of the "
                    "same script measured after it ({file}); the trace and steps.csv are the measured window's")


@dataclass
class ProfileMeta:
    """Where a Profile's figures came from, and what reading them said."""

    source: str | None = None       # "probe" (a run dir), "trace" (advise analyze) or "summary" (a rank's)
    step_source: str | None = None  # what ended each step: optimizer, dataloader, backward, explicit, ProfilerStep
    trace: str | None = None        # the trace's file, where one was read
    step_parts: str | None = None   # "device": a step's parts read on the device's timeline (a GPU trace), else "host"
    steps_window: Literal["measured", "quiet"] = "measured"  # "quiet": the steps are steps-quiet.csv's (a neighbour disturbed the measured window)
    notes: list[str] = field(default_factory=list)  # what could not be read, said once in the report's warnings
    log_tail: str | None = None     # the script log's last lines (a failed run's report shows them)

    @classmethod
    def of(cls, data: "ProfileMeta | dict | None") -> "ProfileMeta":
        """`data` as a ProfileMeta: a dict (a Profile built by hand, a plugin's test) read once, its
        unknown keys left out."""
        if isinstance(data, ProfileMeta):
            return data
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in (data or {}).items() if k in known})


@dataclass
class Profile:
    steps: pd.DataFrame
    trace: TraceFrames | None = None
    samples: pd.DataFrame = field(default_factory=pd.DataFrame)
    env: Env = field(default_factory=lambda: Env.read({}))
    observed: Observed = field(default_factory=lambda: Observed.read({}))
    memory: MemoryAccount = field(default_factory=lambda: MemoryAccount.read({}))
    meta: ProfileMeta = field(default_factory=ProfileMeta)
    sources: Sources | None = None  # the probe's sources.json (None without one)
    _trace_sources: Sources | None = field(default=None, repr=False)  # derived from the trace on first use
    # every rank's Profile (this one among them) when the job had several; empty for one rank
    ranks: list["Profile"] = field(default_factory=list)
    # figures derived from the trace, by key: computed once (see `derived`), or ahead in a fork
    memo: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        # read once: a dict (a Profile built by hand, a plugin's test) becomes its typed account here
        self.env, self.observed, self.memory = Env.read(self.env), Observed.read(self.observed), MemoryAccount.read(self.memory)
        self.meta = ProfileMeta.of(self.meta)

    def derived(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, once per Profile: a table several readers (or a forked child) want."""
        if key not in self.memo:
            self.memo[key] = compute()
        return self.memo[key]

    # trace frames, empty when the run has no trace ---------------------------------------
    def _frame(self, name: str) -> pd.DataFrame:
        return getattr(self.trace if self.trace is not None else TraceFrames.empty(), name)

    ops = property(lambda self: self._frame("ops"))
    kernels = property(lambda self: self._frame("kernels"))
    memcpy = property(lambda self: self._frame("memcpy"))
    runtime = property(lambda self: self._frame("runtime"))
    annotations = property(lambda self: self._frame("annotations"))
    python = property(lambda self: self._frame("python"))
    memory_events = property(lambda self: self._frame("memory"))
    trace_steps = property(lambda self: self._frame("steps"))

    @property
    def job(self) -> JobProfile:
        """The whole job as the cross-rank rules read it: every rank, or this one alone."""
        members = self.ranks or [self]
        key = tuple(map(id, members))
        cached = self.__dict__.get("_job")
        if cached is None or cached[0] != key:  # built once per set of ranks: every cross-rank rule reads it
            cached = self.__dict__["_job"] = (key, JobProfile(members))
        return cached[1]

    @property
    def device(self) -> str:
        return self.env.device or "cpu"

    # the names rules read the typed account by before `env`, `observed` and `memory` were typed
    @property
    def environment(self) -> Env:
        return self.env

    @property
    def seen(self) -> Observed:
        return self.observed

    @property
    def memory_account(self) -> MemoryAccount:
        return self.memory

    @property
    def probed(self) -> bool:
        """Whether the probe described the script (a bare trace's Profile has no ``observed``)."""
        return bool(self.observed.record())

    @property
    def step_source(self) -> str | None:
        """What ended each step: optimizer, dataloader, backward or explicit (None: a trace alone)."""
        return self.meta.step_source

    @property
    def trace_only(self) -> bool:
        """A trace read alone (advise analyze): its steps are the trace's ProfilerSteps, not the probe's."""
        return self.meta.source == "trace"

    @property
    def parts_on_device(self) -> bool:
        """Whether the steps' data wait and optimizer time are the device's (a GPU trace read alone):
        the wait is then the device's idle time already, none of it hidden behind queued work."""
        return self.meta.step_parts == "device"

    @property
    def has_gpu(self) -> bool:
        return self.device == "cuda" or (self.trace is not None and bool(self.trace.meta.get("has_gpu")))

    def locations(self, category: str, *, top: int = source_sites.TOP, **match: object) -> list[SourceLocation]:
        """Where in the user's code `category` (host-sync, matmul, h2d-copy, dataloader) happens:
        the `top` sites whose fields equal `match`, most calls first; from the probe's sources.json, else
        (no file, or a branch its warm-up step did not take) the trace's Python frames."""
        found = source_sites.locations(self.sources, category, top=top, **match)
        if not found and self.trace is not None:
            if self._trace_sources is None:
                self._trace_sources = source_sites.from_trace(self.trace) or Sources()
            found = source_sites.locations(self._trace_sources, category, top=top, **match)
        return found

    # constructors ------------------------------------------------------------------------
    @classmethod
    def from_run_dir(cls, run_dir: str | Path, rank_suffix: str = "") -> "Profile":
        """Load what the probe left in `run_dir`; a missing or broken trace is noted, not fatal."""
        run_dir = Path(run_dir)
        names = layout.names(rank_suffix)
        probe = read_account(run_dir / names.probe_json) or ChildAccount()
        steps = _read_csv(run_dir / names.steps_csv)
        samples = read_samples(run_dir, rank_suffix)
        trace, notes = None, []
        window: Literal["measured", "quiet"] = "measured"
        if not (quiet := _read_csv(run_dir / names.quiet_steps_csv)).empty:
            steps, window = quiet, "quiet"  # a neighbour disturbed the measured window (advisor.experiments.look)
            notes.append(QUIET_STEPS_NOTE.format(file=names.quiet_steps_csv, steps=len(quiet)))
        if (run_dir / names.trace).exists():
            try:
                trace = load_trace(run_dir / names.trace)
                notes += trace.meta.get("warnings", [])
            except TraceError as exc:
                notes.append(f"trace not loaded: {exc}")
        return cls(
            steps=steps,
            trace=trace,
            samples=samples,
            env=probe.env,
            observed=probe.observed,
            memory=probe.memory,
            meta=ProfileMeta(source="probe", step_source=probe.step_source, steps_window=window,
                             trace=names.trace if trace is not None else None, notes=notes,
                             log_tail=_tail(run_dir / names.log, LOG_TAIL_LINES)),
            sources=Sources.load(run_dir / names.sources),
        )

    @classmethod
    def from_trace(cls, path: str | Path, read: Callable[[str | Path], TraceFrames] = load_trace) -> "Profile":
        """A Profile from a Kineto trace alone: steps from its ``ProfilerStep#N`` spans, each ending
        where the last kernel it launched ends (a span ends when Python moves on: on a GPU that
        is a step or more before the device does).

        On a GPU the step's parts (data wait, optimizer) are read on the device's timeline too
        (:mod:`advisor.trace.device_parts`): the host's ranges hold the time it waited for the
        device. A host-only trace's parts are its ranges, less an optimizer's closure.

        `read`: path -> TraceFrames (a command's read-ahead, :meth:`advisor.trace.ReadAhead.frames`)."""
        trace = read(path)
        ts = trace.steps
        on_device = bool(trace.meta.get("has_gpu"))
        host_optimizer = (ts["optimizer_us"] - closure_us(trace, ts["index"])).clip(lower=0)
        data_wait = ts["device_data_wait_us"] if on_device else ts["data_wait_us"]
        optimizer = ts["device_optimizer_us"].fillna(host_optimizer) if on_device else host_optimizer
        steps = pd.DataFrame(
            {
                steptime.INDEX: ts["index"].astype(int),
                steptime.DURATION: ts["device_dur_us"] / 1e6,  # the step re-anchored to its last kernel's end
                steptime.HOST: ts["dur_us"] / 1e6,
                steptime.CPU: float("nan"),
                steptime.CLOCK: "device" if len(trace.kernels) else "host",
                steptime.DATA_WAIT: data_wait / 1e6,
                steptime.OPTIMIZER: optimizer / 1e6,
                steptime.BACKWARD: float("nan"),
                steptime.SAMPLES: float("nan"),
                steptime.PROFILED: True,
                steptime.LOSS: float("nan"),
                "gpu_busy_s": ts["gpu_busy_us"] / 1e6,  # a trace's own: the GPU's busy time inside the step
            }
        )
        meta = ProfileMeta(source="trace", step_source="ProfilerStep" if len(ts) else None, trace=str(path),
                           step_parts="device" if on_device else "host", notes=list(trace.meta.get("warnings", [])))
        return cls(steps=steps, trace=trace, env=env_from_trace(trace), meta=meta)


def closure_us(trace: TraceFrames, index: pd.Series) -> pd.Series:
    """Per step, the host's time in ``Optimizer.step`` ranges spent running a closure (LBFGS,
    Lightning): forward and backward inside the optimizer's range are the model's time, not the
    optimizer's. A trace does not mark the closure: it is read as the span from the range's start
    to the end of the last backward op inside it
    (:func:`advisor.trace.device_parts.optimizer_ranges`; the probe times closures exactly)."""
    ranges = optimizer_ranges(trace.annotations, trace.ops)
    if not len(ranges):
        return pd.Series(0.0, index=index.index)
    by_step = (ranges["work_us"] - ranges["ts_us"]).groupby(ranges["step"]).sum()
    return index.map(by_step).fillna(0.0).astype(float)


def env_from_trace(trace: TraceFrames) -> Env:
    """What a trace says about its machine: deviceProperties and distributedInfo."""
    props = trace.meta.get("device_properties") or []
    first = props[0] if props else {}
    return Env.read({  # read as the probe's is: the trace's own fields, of any type, said as they are
        "device": "cuda" if trace.meta.get("has_gpu") else "cpu",
        "device_name": first.get("name"),
        "device_capability": f"{first['computeMajor']}.{first['computeMinor']}" if "computeMajor" in first else None,
        "device_memory_bytes": first.get("totalGlobalMem"),
        "device_count": len(props) or None,
        "rank": trace.meta.get("rank"),
        "world_size": trace.meta.get("world_size"),
    })


def _tail(path: Path, n: int) -> str:
    """The last `n` lines of the script's log, without the profiler's own lines ('' when unreadable)."""
    try:
        return "\n".join(without_chatter(path.read_text(errors="replace")).splitlines()[-n:])
    except OSError:
        return ""


def read_samples(run_dir: Path, rank_suffix: str = "") -> pd.DataFrame:
    """The sampler's ticks in a run dir so far (empty where there are none yet)."""
    return _read_csv(Path(run_dir) / layout.names(rank_suffix).samples_csv)


def _read_csv(path: Path) -> pd.DataFrame:
    try:
        return pd.read_csv(path)
    except (OSError, ValueError, pd.errors.EmptyDataError):
        return pd.DataFrame()
