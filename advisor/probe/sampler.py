"""Out-of-process resource sampler for the training child.

The advisor runs the user's script as a child process and samples it from the
parent on a timer, so the measurement costs the training process nothing (no
hooks, no extra threads inside it). CPU/RSS come from psutil over the whole
process tree (DataLoader workers are forked children); GPU figures come from
NVML, used strictly read-only.

Memory: RSS every tick (cheap), summed over the tree, which counts the copy-on-write pages
forked DataLoader workers share with the main process once per process. So, within a small
time budget, the sampler also reads each process's PSS (shared pages split between the
processes that map them; their sum is the tree's real footprint) and USS (pages no other
process maps) from ``/proc/<pid>/smaps_rollup`` (psutil ``memory_full_info``): often enough
to catch each new high (a reading is forced when the tree's RSS passes the highest seen at a
reading), never more than ``FULL_MEMORY_BUDGET`` of the wall time. Where that cannot be read,
the peak rests on RSS and the report says so.

Timestamps use ``time.monotonic()``: on Linux that is CLOCK_MONOTONIC, which is
system-wide, so samples line up with the step timestamps the child records
with the same clock.

Energy: each tick reads the GPU's energy counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ
since the driver loaded; Volta and later) beside its power. A window's energy is the counter's
rise between the window's ends, interpolated between the ticks around them
(:func:`advisor.analysis.metrics.energy`): the parent reads it, so the training process pays
nothing, and the window's ends are the device's own (placed on this clock by the window's one
wait), so nothing is added inside a window. Power (``nvmlDeviceGetPowerUsage``) is a one-second
average on Hopper and later, older than a window of ten 20 ms steps; it stands in only where the
counter is missing.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import pandas as pd
import psutil

from advisor.run_dir.atomic import write_text_atomic
from advisor.waits import WAIT_COLUMNS, WaitClock

from .nvml_reader import GPU_COLUMNS, GpuReader
from .tree_cpu import Times, TreeCpu

__all__ = ["Sampler", "COLUMNS"]

NAN = float("nan")

COLUMNS: list[str] = ["t", "cpu_percent", "rss_bytes", "pss_bytes", "uss_bytes", "n_procs", "sys_cpu_percent",
                      "main_cpu_percent", "advise_cpu_percent", *GPU_COLUMNS, *WAIT_COLUMNS]

# Reading smaps_rollup walks the page tables: ~10 ms for a 400 MB process on a busy 2-core box.
FULL_MEMORY_BUDGET = 0.03   # at most this share of the wall time goes to PSS/USS readings ...
FULL_MEMORY_PEAK_BUDGET = 0.10  # ... or this much, to read a new high of the tree's RSS

# Per-process errors that mean "this process is gone or not ours to read":
# expected while DataLoader workers come and go, so they are skipped, not reported.
_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


def descendant_pids(pid: int) -> list[int] | None:
    """Descendants from /proc/<pid>/task/*/children: cost grows with the tree, not the machine.

    psutil's children(recursive=True) reads every process on the host each tick, which on a
    busy 2-core box took ~70% of a tick and competed with the training process. None when
    the kernel lacks the children files (CONFIG_PROC_CHILDREN), to fall back on psutil.
    """
    out: list[int] = []
    stack = [pid]
    while stack:
        current = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except FileNotFoundError:
            if current == pid:
                raise psutil.NoSuchProcess(pid) from None
            continue
        except OSError:
            return None
        for tid in tasks:
            try:
                with open(f"/proc/{current}/task/{tid}/children") as f:
                    kids = [int(k) for k in f.read().split()]
            except FileNotFoundError:
                if not os.path.exists(f"/proc/{current}/task/{tid}"):
                    continue  # the thread ended between listdir and open
                return None
            except OSError:
                continue
            out.extend(kids)
            stack.extend(kids)
    return out


class Sampler:
    """Samples CPU/RSS of a process tree (psutil) and the GPU (NVML, read-only) on a background thread.

    Runs in the parent so the child pays nothing. One dict per tick (see
    ``COLUMNS``). Anything that could not be measured is NaN in the data and
    explained once in :attr:`notes`; sampling never raises into the caller.
    The thread ends by itself when the root pid exits (or turns zombie).

    Caveats worth knowing when reading the numbers: ``rss_bytes`` sums RSS over
    the tree, so copy-on-write pages shared by forked workers are counted once
    per process (an upper bound); ``pss_bytes`` / ``uss_bytes`` do not, but are
    read only on some ticks (NaN on the others; see the module's docstring). CPU
    is read from each process's cumulative times (:class:`TreeCpu`): a new
    process's first interval counts, and a process that ended is counted through
    the parent that reaped it.
    """

    def __init__(self, pid: int, interval_s: float = 0.1, gpu_index: int | None = None) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self.pid = int(pid)
        self.interval_s = float(interval_s)

        self._samples: list[dict] = []
        self._notes: list[str] = []
        self._noted: set[str] = set()
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._stop_lock = threading.Lock()

        self._root: psutil.Process | None = None
        self._procs: dict[int, psutil.Process] = {}  # reused: psutil caches a process's identity
        self.tree_cpu = TreeCpu()

        self.gpu = GpuReader(self._note, gpu_index)
        self._tick_cost_s: list[float] = []
        self.stopped_because: str | None = None  # e.g. "process 123 exited": the normal end, not a note

        self.unique = UniqueMemory(self._note, self.interval_s)
        self.waits = WaitClock()
        self._own = psutil.Process()  # advise's own process

    # ------------------------------------------------------------------ API
    @property
    def samples(self) -> list[dict]:
        """Copy of the samples so far (safe to read while sampling runs)."""
        with self._lock:
            return list(self._samples)

    def last(self, n: int) -> list[dict]:
        """The last `n` samples (safe to read while sampling runs)."""
        with self._lock:
            return self._samples[-n:]

    @property
    def notes(self) -> list[str]:
        """Why something was not sampled; each distinct reason once."""
        with self._lock:
            return list(self._notes)

    @property
    def gpu_index(self) -> int | None:
        """The NVML index of the GPU sampled (None: no GPU is)."""
        return self.gpu.gpu_index

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def mean_tick_cost_ms(self) -> float:
        """Mean wall time spent inside one tick (sampling overhead in the parent)."""
        with self._lock:
            costs = list(self._tick_cost_s)
        return 1000.0 * sum(costs) / len(costs) if costs else NAN

    def start(self) -> None:
        """Prime psutil/NVML and launch the sampling thread (call once)."""
        if self._thread is not None:
            raise RuntimeError("Sampler already started")
        try:
            self._root = psutil.Process(self.pid)
            self._procs[self.pid] = self._root
        except _GONE as exc:
            self._note("root", f"process {self.pid} not sampled: {type(exc).__name__}: {exc}")
            self._root = None
        psutil.cpu_percent(None)  # prime the system-wide counter; first call is meaningless
        for missing in self.waits.missing(self.pid):  # said once (the experiments say their fallback)
            self._note(f"waits:{missing}", f"the kernel gives no {missing}: samples.csv leaves its column empty")
        self.gpu.start()
        self._thread = threading.Thread(target=self._run, name=f"advisor-sampler-{self.pid}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and release NVML. Idempotent; returns within one tick."""
        self._stop_event.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
            self.gpu.stop()

    def __enter__(self) -> "Sampler":
        self.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def to_frame(self) -> pd.DataFrame:
        """Samples as a DataFrame; every column in ``COLUMNS`` is present even with no rows."""
        df = pd.DataFrame(self.samples, columns=COLUMNS)
        return df.astype({c: "float64" for c in COLUMNS if c != "n_procs"}).astype({"n_procs": "int64"})

    def write_csv(self, path: str | os.PathLike) -> None:
        """Write atomically (see :mod:`advisor.run_dir.atomic`) so readers never see half a file."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, self.to_frame().to_csv(index=False))

    # ------------------------------------------------------------ internals
    def _note(self, key: str, message: str) -> None:
        with self._lock:
            if key in self._noted:
                return
            self._noted.add(key)
            self._notes.append(message)

    def _run(self) -> None:
        next_t = time.monotonic()
        while not self._stop_event.is_set():
            t0 = time.perf_counter()
            try:
                keep_going = self._tick()
            except Exception as exc:  # noqa: BLE001 - a bug in a tick may be anything; it must not kill sampling silently
                self._note(f"tick:{type(exc).__name__}", f"sampler tick failed: {type(exc).__name__}: {exc}")
                keep_going = True
            with self._lock:
                self._tick_cost_s.append(time.perf_counter() - t0)
            if not keep_going:
                return
            next_t += self.interval_s
            now = time.monotonic()
            if next_t < now:  # fell behind (slow tick / suspended): skip, don't burst
                next_t = now + self.interval_s
            self._stop_event.wait(next_t - now if next_t > now else self.interval_s)

    def _tick(self) -> bool:
        """Take one sample; False when the root process is gone."""
        t = time.monotonic()
        energy = self.gpu.energy() if self.gpu.ok else NAN  # first: a window's ends are interpolated at `t`
        root = self._root
        if root is None:
            return False
        try:
            if root.status() == psutil.STATUS_ZOMBIE:
                raise psutil.ZombieProcess(self.pid)
            children = descendant_pids(self.pid)
            if children is None:  # no /proc/<pid>/task/*/children: let psutil scan every process
                children = [c.pid for c in root.children(recursive=True)]
        except _GONE:
            self.stopped_because = f"process {self.pid} exited"
            return False

        self._procs = alive = self._alive(root, children)
        cpu, main_cpu, rss, n = self._cpu_and_rss(alive, t)
        pss, uss = self.unique.read(alive.values(), t, rss)

        sample: dict[str, Any] = {
            "t": t,
            "cpu_percent": cpu,
            "rss_bytes": float(rss),
            "pss_bytes": pss,
            "uss_bytes": uss,
            "n_procs": n,
            "sys_cpu_percent": psutil.cpu_percent(None),
            "main_cpu_percent": main_cpu,
            "advise_cpu_percent": self._own_cpu(),  # not another process's load (analysis.metrics.outside_per_tick)
        }
        sample.update(self.gpu.sample(alive.keys()) if self.gpu.ok else dict.fromkeys(GPU_COLUMNS, NAN))
        sample["gpu_energy_mj"] = energy
        sample.update(self.waits.read(alive.keys(), self.pid))  # the kernel's wait clock (advisor.waits)
        with self._lock:
            self._samples.append(sample)
        return True

    def _own_cpu(self) -> float:
        """advise's own CPU since the last tick, in percent of a core (its first reading is 0)."""
        try:
            return float(self._own.cpu_percent(None))
        except psutil.Error:
            return NAN

    def _alive(self, root: psutil.Process, children: list[int]) -> dict[int, psutil.Process]:
        """The tree's processes now, each psutil object reused (it caches the process's identity, its last
        reading); a recycled pid gets a fresh one (its create_time differs)."""
        alive: dict[int, psutil.Process] = {self.pid: root}
        for pid in children:
            try:
                child = psutil.Process(pid) if pid not in self._procs else self._procs[pid]
                if pid in self._procs and not child.is_running():
                    child = psutil.Process(pid)
            except _GONE:
                continue
            alive[pid] = child
        return alive

    def _cpu_and_rss(self, alive: dict[int, psutil.Process], t: float) -> tuple[float, float, float, int]:
        """(CPU % over the tree since the last tick, the script's own process's, RSS summed,
        processes read): the CPU from each process's cumulative times (:class:`TreeCpu`)."""
        times: dict[tuple[int, float], Times] = {}
        rss, n, root = 0, 0, (self.pid, 0.0)
        for proc in alive.values():
            try:
                with proc.oneshot():
                    c = proc.cpu_times()
                    r = proc.memory_info().rss
                    key = (proc.pid, proc.create_time())
            except _GONE:
                continue
            times[key] = Times(c.user + c.system, c.children_user + c.children_system)
            root = key if proc.pid == self.pid else root
            rss += r
            n += 1
        cpu, main_cpu = self.tree_cpu.read(t, times, root)
        return cpu, main_cpu if root in times else NAN, rss, n


class UniqueMemory:
    """The tree's summed PSS and USS (``/proc/<pid>/smaps_rollup``), read within a share of the wall
    time (FULL_MEMORY_BUDGET; FULL_MEMORY_PEAK_BUDGET to catch a new high of the RSS); NaN where a
    reading is not due or cannot be made (said once, through `note`)."""

    def __init__(self, note: Callable[[str, str], None], interval_s: float) -> None:
        self._note, self.interval_s = note, interval_s
        self.readable = True  # turned off at the first refusal
        self.spent_s = 0.0
        self.peak_rss = 0.0  # the tree's RSS at the highest reading so far
        self.started_t: float | None = None

    def read(self, procs: Iterable, t: float, rss: float) -> tuple[float, float]:
        if not self.readable:
            return NAN, NAN
        if self.started_t is None:
            self.started_t = t
        elapsed = max(t - self.started_t, self.interval_s)
        new_high = rss > self.peak_rss * 1.02
        if not (self.spent_s <= FULL_MEMORY_BUDGET * elapsed
                or (new_high and self.spent_s <= FULL_MEMORY_PEAK_BUDGET * elapsed)):
            return NAN, NAN
        t0 = time.perf_counter()
        pss = uss = 0.0
        try:
            for proc in procs:
                try:
                    full = proc.memory_full_info()
                except _GONE:
                    continue
                pss += getattr(full, "pss", NAN)
                uss += full.uss
        except (psutil.Error, NotImplementedError, AttributeError, OSError) as exc:
            self.readable = False
            self._note("pss", f"unique memory (PSS/USS) not readable ({type(exc).__name__}: {exc}); "
                              "peak memory rests on RSS summed over the processes")
            return NAN, NAN
        finally:
            self.spent_s += time.perf_counter() - t0
        self.peak_rss = max(self.peak_rss, rss)
        return pss, uss
