"""The GPU as NVML sees it, read-only, for the parent's sampler: one reader per run, started on
the GPU CUDA_VISIBLE_DEVICES names and moved to the one whose processes are the script's. A query
a GPU refuses for good (NotSupported) is said once and not asked again, so a tick stays cheap."""

from __future__ import annotations

import os
from functools import partial
from typing import Any, Callable

try:  # nvidia-ml-py is a dependency, but a broken install must not kill CPU sampling.
    import pynvml
except Exception as _exc:  # noqa: BLE001 - a broken install may raise anything on import  # pragma: no cover
    pynvml = None
    _PYNVML_IMPORT_ERROR: str | None = f"{type(_exc).__name__}: {_exc}"
else:
    _PYNVML_IMPORT_ERROR = None

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
LOCATE_EVERY = 10  # ticks between looks for the GPU that runs the script, until it is found


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
    except pynvml.NVMLError as exc:
        return {"available": False, "reason": f"NVML unavailable: {_nvml_error_text(exc)}"}
    try:
        try:
            count = pynvml.nvmlDeviceGetCount()
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as exc:
            return {
                "available": False,
                "reason": f"NVML has no GPU index {index}: {_nvml_error_text(exc)}",
            }
        info: dict[str, Any] = {"available": True, "index": index, "device_count": count}
        notes: list[str] = [index_note] if index_note else []

        def grab(key: str, fn: Callable[[], Any]) -> None:
            try:
                info[key] = fn()
            except (pynvml.NVMLError, AttributeError) as exc:  # AttributeError: a query an older nvidia-ml-py lacks
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
        except pynvml.NVMLError:
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


class GpuReader:
    """NVML's handle on the watched GPU, its queries and what they could not read (`note(key,
    message)`: the sampler's, each reason once)."""

    def __init__(self, note: Callable[[str, str], None], gpu_index: int | None = None) -> None:
        self._note = note
        self._gpu_index_arg = gpu_index
        self.gpu_index: int | None = None  # resolved in start()
        self.ok = False
        self._handle: Any = None
        self._located = False  # the watched GPU is known to be the script's (it lists one of the tree's pids)
        self._gpu_ticks = 0
        self._disabled_queries: set[str] = set()

    def start(self) -> None:
        if pynvml is None:
            self._note("nvml", f"GPU not sampled: NVML unavailable (pynvml import failed: {_PYNVML_IMPORT_ERROR}); "
                               "CPU and memory sampled")
            return
        index, index_note = _resolve_gpu_index(self._gpu_index_arg)
        if index_note:
            self._note("cuda_visible_devices", index_note)
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            self._note("nvml", f"GPU not sampled: NVML unavailable ({_nvml_unavailable_why(exc)}); CPU and memory sampled")
            return
        try:
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except pynvml.NVMLError as exc:
            self._note("nvml", f"NVML GPU index {index} unavailable: {_nvml_error_text(exc)}")
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError:
                pass  # already reporting the real problem above
            return
        self.gpu_index = index
        self.ok = True

    def stop(self) -> None:
        """NVML released (once)."""
        if not self.ok:
            return
        self.ok, self._handle = False, None
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as exc:
            self._note("nvmlShutdown", f"nvmlShutdown failed: {_nvml_error_text(exc)}")

    def _query(self, name: str, fn: Callable[[], Any]) -> Any:
        """Run one NVML query; None on failure (noted once, disabled if permanent)."""
        if name in self._disabled_queries:
            return None
        try:
            return fn()
        except (pynvml.NVMLError, AttributeError) as exc:  # AttributeError: a query an older nvidia-ml-py lacks
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

    def energy(self) -> float:
        """The GPU's energy counter in mJ; NaN where it cannot be read (before Volta: NotSupported,
        noted once and not asked again)."""
        h = self._handle
        energy = self._query("nvmlDeviceGetTotalEnergyConsumption",
                             lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h))
        return NAN if energy is None else float(energy)

    def sample(self, pids: Any) -> dict[str, float]:
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
