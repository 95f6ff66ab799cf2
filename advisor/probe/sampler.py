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
from functools import partial
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import psutil

from advisor.run_dir.atomic import write_text_atomic

try:  # nvidia-ml-py is a dependency, but a broken install must not kill CPU sampling.
    import pynvml
except Exception as _exc:  # pragma: no cover - depends on the environment
    pynvml = None
    _PYNVML_IMPORT_ERROR: str | None = f"{type(_exc).__name__}: {_exc}"
else:
    _PYNVML_IMPORT_ERROR = None

__all__ = ["Sampler", "nvml_snapshot", "COLUMNS", "GPU_COLUMNS"]

NAN = float("nan")

GPU_COLUMNS: list[str] = [
    "gpu_util_percent",
    "gpu_mem_util_percent",
    "gpu_mem_used_bytes",
    "gpu_mem_total_bytes",
    "gpu_power_w",
    "gpu_energy_mj",
    "gpu_sm_clock_mhz",
    "gpu_proc_mem_bytes",
    "gpu_other_procs",
    "gpu_pcie_tx_kbps",
    "gpu_pcie_rx_kbps",
]
COLUMNS: list[str] = ["t", "cpu_percent", "rss_bytes", "pss_bytes", "uss_bytes", "n_procs", "sys_cpu_percent",
                      "main_cpu_percent", *GPU_COLUMNS]

LOCATE_EVERY = 10  # ticks between looks for the GPU that runs the script, until it is found

# Reading smaps_rollup walks the page tables: ~10 ms for a 400 MB process on a busy 2-core box.
FULL_MEMORY_BUDGET = 0.03   # at most this share of the wall time goes to PSS/USS readings ...
FULL_MEMORY_PEAK_BUDGET = 0.10  # ... or this much, to read a new high of the tree's RSS

# Per-process errors that mean "this process is gone or not ours to read":
# expected while DataLoader workers come and go, so they are skipped, not reported.
_GONE = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess)


def _resolve_gpu_index(gpu_index: int | None) -> tuple[int, str | None]:
    """Pick the NVML index to watch; returns (index, note-or-None).

    CUDA_VISIBLE_DEVICES remaps indices inside the child, so its first entry is
    the physical GPU the child's ``cuda:0`` lands on. NVML enumerates in PCI
    bus order, which matches CUDA only with CUDA_DEVICE_ORDER=PCI_BUS_ID (the
    usual single-GPU case is unaffected). UUID/MIG entries fall back to 0.
    """
    if gpu_index is not None:
        return int(gpu_index), None
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is None or not cvd.strip():
        return 0, None
    first = cvd.split(",")[0].strip()
    try:
        return int(first), None
    except ValueError:
        return 0, f"CUDA_VISIBLE_DEVICES={cvd!r} is not a plain integer list; sampling GPU index 0"


def _nvml_error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _is_permanent_nvml_error(exc: BaseException) -> bool:
    """NotSupported / FunctionNotFound will not change: stop asking (keeps ticks cheap)."""
    if pynvml is None or not isinstance(exc, pynvml.NVMLError):
        return False
    return getattr(exc, "value", None) in (
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    )


def _nvml_unavailable_why(exc: BaseException) -> str:
    """Why NVML is unavailable, plainly: on a machine without an NVIDIA driver that is expected."""
    text = _nvml_error_text(exc)
    if pynvml is not None and getattr(exc, "value", None) in (getattr(pynvml, "NVML_ERROR_LIBRARY_NOT_FOUND", None),
                                                            getattr(pynvml, "NVML_ERROR_DRIVER_NOT_LOADED", None)):
        return f"no NVIDIA driver on this machine: {text}"
    return text


def _as_str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_snapshot(gpu_index: int | None = None) -> dict:
    """Static facts about the GPU the child will use, for the report header.

    Read-only NVML queries only. Returns ``{"available": False, "reason": ...}``
    when there is no driver/GPU, so callers never need a try/except. Fields
    that a given driver/GPU does not support are left out and explained in
    ``"notes"``.
    """
    if pynvml is None:
        return {"available": False, "reason": f"pynvml import failed: {_PYNVML_IMPORT_ERROR}"}
    index, index_note = _resolve_gpu_index(gpu_index)
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return {"available": False, "reason": f"NVML unavailable: {_nvml_error_text(exc)}"}
    try:
        try:
            count = pynvml.nvmlDeviceGetCount()
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            return {
                "available": False,
                "reason": f"NVML has no GPU index {index}: {_nvml_error_text(exc)}",
            }
        info: dict[str, Any] = {"available": True, "index": index, "device_count": count}
        notes: list[str] = [index_note] if index_note else []

        def grab(key: str, fn: Callable[[], Any]) -> None:
            try:
                info[key] = fn()
            except Exception as exc:
                notes.append(f"{key}: {_nvml_error_text(exc)}")

        grab("name", lambda: _as_str(pynvml.nvmlDeviceGetName(handle)))
        grab("uuid", lambda: _as_str(pynvml.nvmlDeviceGetUUID(handle)))
        grab("memory_total_bytes", lambda: int(pynvml.nvmlDeviceGetMemoryInfo(handle).total))
        grab("driver_version", lambda: _as_str(pynvml.nvmlSystemGetDriverVersion()))
        grab("cuda_capability", lambda: tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle)))
        grab("power_limit_w", lambda: pynvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0)
        if notes:
            info["notes"] = notes
        return info
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass  # init succeeded, so shutdown failing leaves nothing to report or fix


def other_gpu_processes(listed: list[int], tree: set[int]) -> int:
    """How many of the processes NVML lists on the watched GPU are not the script's: a device that
    is not the script's alone times like a CPU with a neighbour. In a container NVML lists host pids
    and none match the script's tree; the script is then taken to be one of those listed."""
    others = [pid for pid in listed if pid not in tree]
    return len(others) - (1 if others and len(others) == len(listed) else 0)


def script_gpu(listed: dict[int, list[int]], tree: set[int]) -> int | None:
    """The NVML index of the GPU whose processes include the script's (a script on cuda:1, or one that
    CUDA_VISIBLE_DEVICES maps by UUID), None where none does (not started yet, or a container's pids)."""
    return next((index for index, pids in sorted(listed.items()) if tree.intersection(pids)), None)


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
    read only on some ticks (NaN on the others; see the module's docstring). A
    process's first tick reports 0 % CPU (psutil needs two readings), and CPU
    spent by processes that live less than one interval is not seen.
    """

    def __init__(self, pid: int, interval_s: float = 0.1, gpu_index: int | None = None):
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self.pid = int(pid)
        self.interval_s = float(interval_s)
        self._gpu_index_arg = gpu_index
        self.gpu_index: int | None = None  # resolved in start()

        self._samples: list[dict] = []
        self._notes: list[str] = []
        self._noted: set[str] = set()
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._stop_lock = threading.Lock()

        self._root: psutil.Process | None = None
        # Cached so cpu_percent() compares against the previous call on the same object.
        self._procs: dict[int, psutil.Process] = {}

        self._nvml_ok = False
        self._handle: Any = None
        self._located = False  # the watched GPU is known to be the script's (it lists one of the tree's pids)
        self._gpu_ticks = 0
        self._disabled_queries: set[str] = set()
        self._tick_cost_s: list[float] = []
        self.stopped_because: str | None = None  # e.g. "process 123 exited": the normal end, not a note

        self._full_memory = True  # PSS/USS readable (turned off at the first refusal)
        self._full_spent_s = 0.0
        self._full_peak_rss = 0.0  # the tree's RSS at the highest reading so far
        self._started_t: float | None = None

    # ------------------------------------------------------------------ API
    @property
    def samples(self) -> list[dict]:
        """Copy of the samples so far (safe to read while sampling runs)."""
        with self._lock:
            return list(self._samples)

    @property
    def notes(self) -> list[str]:
        """Why something was not sampled; each distinct reason once."""
        with self._lock:
            return list(self._notes)

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
            self._root.cpu_percent(None)
        except _GONE as exc:
            self._note("root", f"process {self.pid} not sampled: {type(exc).__name__}: {exc}")
            self._root = None
        psutil.cpu_percent(None)  # prime the system-wide counter; first call is meaningless
        self._init_nvml()
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
            if self._nvml_ok:
                self._nvml_ok = False
                self._handle = None
                try:
                    pynvml.nvmlShutdown()
                except Exception as exc:
                    self._note("nvmlShutdown", f"nvmlShutdown failed: {_nvml_error_text(exc)}")

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

    def _init_nvml(self) -> None:
        if pynvml is None:
            self._note("nvml", f"GPU not sampled: NVML unavailable (pynvml import failed: {_PYNVML_IMPORT_ERROR}); "
                               "CPU and memory sampled")
            return
        index, index_note = _resolve_gpu_index(self._gpu_index_arg)
        if index_note:
            self._note("cuda_visible_devices", index_note)
        try:
            pynvml.nvmlInit()
        except Exception as exc:
            self._note("nvml", f"GPU not sampled: NVML unavailable ({_nvml_unavailable_why(exc)}); CPU and memory sampled")
            return
        try:
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            self._note("nvml", f"NVML GPU index {index} unavailable: {_nvml_error_text(exc)}")
            try:
                pynvml.nvmlShutdown()
            except Exception:
                pass  # already reporting the real problem above
            return
        self.gpu_index = index
        self._nvml_ok = True

    def _run(self) -> None:
        next_t = time.monotonic()
        while not self._stop_event.is_set():
            t0 = time.perf_counter()
            try:
                keep_going = self._tick()
            except Exception as exc:  # a bug must not kill sampling silently
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
        energy = self._energy() if self._nvml_ok else NAN  # first: a window's ends are interpolated at `t`
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

        alive: dict[int, psutil.Process] = {self.pid: root}
        for pid in children:
            # Reuse the cached object (keeps cpu_percent's previous reading); a
            # recycled pid gets a fresh object because create_time differs.
            try:
                child = psutil.Process(pid) if pid not in self._procs else self._procs[pid]
                if pid in self._procs and not child.is_running():
                    child = psutil.Process(pid)
            except _GONE:
                continue
            alive[pid] = child
        self._procs = alive

        cpu = 0.0
        main_cpu = NAN  # the script's own process; the rest of the tree is its workers and helpers
        rss = 0
        n = 0
        for proc in alive.values():
            try:
                with proc.oneshot():
                    c = proc.cpu_percent(None)
                    r = proc.memory_info().rss
            except _GONE:
                continue
            if proc.pid == self.pid:
                main_cpu = c
            cpu += c
            rss += r
            n += 1
        pss, uss = self._unique_memory(alive.values(), t, rss)

        sample: dict[str, Any] = {
            "t": t,
            "cpu_percent": cpu,
            "rss_bytes": float(rss),
            "pss_bytes": pss,
            "uss_bytes": uss,
            "n_procs": n,
            "sys_cpu_percent": psutil.cpu_percent(None),
            "main_cpu_percent": main_cpu,
        }
        sample.update(self._gpu_sample(alive.keys()) if self._nvml_ok else dict.fromkeys(GPU_COLUMNS, NAN))
        sample["gpu_energy_mj"] = energy
        with self._lock:
            self._samples.append(sample)
        return True

    def _unique_memory(self, procs, t: float, rss: float) -> tuple[float, float]:
        """The tree's summed PSS and USS, when a reading is due and affordable; NaN otherwise."""
        if not self._full_memory:
            return NAN, NAN
        if self._started_t is None:
            self._started_t = t
        elapsed = max(t - self._started_t, self.interval_s)
        spent = self._full_spent_s
        new_high = rss > self._full_peak_rss * 1.02
        if not (spent <= FULL_MEMORY_BUDGET * elapsed or (new_high and spent <= FULL_MEMORY_PEAK_BUDGET * elapsed)):
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
            self._full_memory = False
            self._note("pss", f"unique memory (PSS/USS) not readable ({type(exc).__name__}: {exc}); "
                              "peak memory rests on RSS summed over the processes")
            return NAN, NAN
        finally:
            self._full_spent_s += time.perf_counter() - t0
        self._full_peak_rss = max(self._full_peak_rss, rss)
        return pss, uss

    def _query(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run one NVML query; None on failure (noted once, disabled if permanent)."""
        if name in self._disabled_queries:
            return None
        try:
            return fn()
        except Exception as exc:
            if _is_permanent_nvml_error(exc):
                self._disabled_queries.add(name)
            self._note(f"nvml:{name}", f"NVML {name} not sampled: {_nvml_error_text(exc)}")
            return None

    def _locate(self, tree: set[int]) -> None:
        """Every LOCATE_EVERY ticks until found: watch the GPU that runs the script's processes."""
        self._gpu_ticks += 1
        if self._located or self._gpu_ticks % LOCATE_EVERY != 1:
            return
        count = self._query("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount) or 0
        listed = {}
        for index in range(count):
            handle = self._query("nvmlDeviceGetHandleByIndex", partial(pynvml.nvmlDeviceGetHandleByIndex, index))
            procs = self._query("nvmlDeviceGetComputeRunningProcesses",
                                partial(pynvml.nvmlDeviceGetComputeRunningProcesses, handle)) if handle else None
            listed[index] = [p.pid for p in procs or []]
        found = script_gpu(listed, tree)
        if found is None:
            return
        self._located = True
        if found != self.gpu_index:
            self._note("gpu_located", f"the script runs on GPU {found} (NVML's index), not {self.gpu_index}: sampling it")
            self._handle, self.gpu_index = pynvml.nvmlDeviceGetHandleByIndex(found), found

    def _energy(self) -> float:
        """The GPU's energy counter in mJ; NaN where it cannot be read (before Volta: NotSupported,
        noted once and not asked again)."""
        h = self._handle
        energy = self._query("nvmlDeviceGetTotalEnergyConsumption",
                             lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h))
        return NAN if energy is None else float(energy)

    def _gpu_sample(self, pids: Any) -> dict[str, float]:
        self._locate(set(pids))
        h = self._handle
        out = dict.fromkeys(GPU_COLUMNS, NAN)

        util = self._query("nvmlDeviceGetUtilizationRates", lambda: pynvml.nvmlDeviceGetUtilizationRates(h))
        if util is not None:
            out["gpu_util_percent"] = float(util.gpu)
            out["gpu_mem_util_percent"] = float(util.memory)
        mem = self._query("nvmlDeviceGetMemoryInfo", lambda: pynvml.nvmlDeviceGetMemoryInfo(h))
        if mem is not None:
            out["gpu_mem_used_bytes"] = float(mem.used)
            out["gpu_mem_total_bytes"] = float(mem.total)
        power = self._query("nvmlDeviceGetPowerUsage", lambda: pynvml.nvmlDeviceGetPowerUsage(h))
        if power is not None:
            out["gpu_power_w"] = power / 1000.0
        clock = self._query("nvmlDeviceGetClockInfo(SM)", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
        if clock is not None:
            out["gpu_sm_clock_mhz"] = float(clock)

        procs = self._query(
            "nvmlDeviceGetComputeRunningProcesses", lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        )
        if procs is not None:
            # In a container NVML may report host pids, so none match: that reads
            # as 0 here, while gpu_mem_used_bytes still shows the device total.
            tree = set(pids)
            out["gpu_other_procs"] = float(other_gpu_processes([p.pid for p in procs], tree))
            used = 0.0
            for p in procs:
                if p.pid in tree:
                    if p.usedGpuMemory is None:
                        used = NAN
                        self._note("nvml:proc_mem_na", "NVML reports per-process GPU memory as not available")
                        break
                    used += p.usedGpuMemory
            out["gpu_proc_mem_bytes"] = used

        tx = self._query(
            "nvmlDeviceGetPcieThroughput(TX)",
            lambda: pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES),
        )
        if tx is not None:
            out["gpu_pcie_tx_kbps"] = float(tx)
        rx = self._query(
            "nvmlDeviceGetPcieThroughput(RX)",
            lambda: pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES),
        )
        if rx is not None:
            out["gpu_pcie_rx_kbps"] = float(rx)
        return out
