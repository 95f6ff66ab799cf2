"""The environment fingerprint: what makes two runs comparable, recorded in report.json.

Two runs on different GPU models measure different machines; two runs on different CPU models
(hosted runners change them under you), torch versions or clocks may differ for reasons that
are not the code's. `collect` records the facts (report.json ``fingerprint``, written by the
advise process that launched the script), `differences` lists every one that differs between two
reports, each marked as invalidating the comparison (exit 2) or as a warning.

Reports written before the fingerprint existed still compare: the facts are read from ``env``.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from typing import Callable

import msgspec

from ..report import Report
from ..report_blocks import Fingerprint
from ..run_dir.seen import Env

# Facts whose difference makes a comparison meaningless: another accelerator is another machine.
INVALIDATING = ("device", "gpu_name")
# (key, what it is) in the order differences are listed.
FACTS = (
    ("device", "devices"),
    ("gpu_name", "GPU models"),
    ("gpu_count", "GPU counts"),
    ("driver_version", "NVIDIA drivers"),
    ("cuda", "CUDA versions"),
    ("gpu_max_sm_clock_mhz", "GPU max SM clocks (MHz)"),
    ("gpu_app_sm_clock_mhz", "GPU application SM clocks (MHz)"),
    ("gpu_app_mem_clock_mhz", "GPU application memory clocks (MHz)"),
    ("gpu_power_limit_w", "GPU power limits (W)"),
    ("cpu_model", "CPU models"),
    ("cpu_count", "CPU counts"),
    ("torch", "torch versions"),
    ("python", "Python versions"),
    ("torch_threads", "torch thread counts"),
    ("argv", "script arguments"),
)
# Facts that describe the moment, not the machine: shown, never a difference.
MOMENT = ("load_avg_1m_start", "load_avg_1m_end")


def cpu_model() -> str | None:
    """The CPU's marketing name (/proc/cpuinfo on Linux, else platform.processor())."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(("model name", "Hardware", "cpu model")):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        pass
    return platform.processor() or platform.machine() or None


def load_avg() -> float | None:
    """The machine's 1-minute load average: how busy the runner was (None where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):
        return None


def gpu(index: int = 0) -> dict:
    """NVML's comparability facts of GPU `index` (read-only queries); {} without NVML or a GPU."""
    try:
        import pynvml  # pynvml: 18 ms, only where a GPU may be
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver: nothing to record
        return {}
    out: dict = {}

    def grab(key: str, read: Callable[[], object]) -> None:
        try:
            value = read()
            out[key] = value.decode() if isinstance(value, bytes) else value
        except Exception:  # noqa: BLE001 - a field this GPU or driver does not report is left out
            pass

    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        grab("gpu_name", lambda: pynvml.nvmlDeviceGetName(handle))
        grab("gpu_count", pynvml.nvmlDeviceGetCount)
        grab("driver_version", pynvml.nvmlSystemGetDriverVersion)
        grab("gpu_max_sm_clock_mhz", lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
        grab("gpu_app_sm_clock_mhz", lambda: pynvml.nvmlDeviceGetApplicationsClock(handle, pynvml.NVML_CLOCK_SM))
        grab("gpu_app_mem_clock_mhz", lambda: pynvml.nvmlDeviceGetApplicationsClock(handle, pynvml.NVML_CLOCK_MEM))
        grab("gpu_power_limit_w", lambda: pynvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0)
    except Exception:  # noqa: BLE001 - pynvml's or a driver's failure, of any kind: the fingerprint goes without the GPU's fields
        pass
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - a driver that fails to let go leaves nothing to report or fix
            pass
    return out


def collect(env: Env, argv: list[str], *, load_start: float | None, with_gpu: bool) -> dict:
    """The run's fingerprint: the child's env (torch, threads, device) and the parent's view of the machine."""
    out = {
        "device": env.device or "cpu",
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch": env.torch,
        "cuda": env.cuda,
        "python": env.python or platform.python_version(),
        "torch_threads": env.torch_threads,
        "argv": list(argv),
        "platform": sys.platform,
        "load_avg_1m_start": load_start,
        "load_avg_1m_end": load_avg(),
    }
    if with_gpu:
        out.update(gpu())
        out.setdefault("gpu_name", env.device_name)
    return out


def of(report: Report) -> dict:
    """A report's fingerprint, completed from ``env`` (and ``argv``) for reports that predate it."""
    env = report.env
    given = report.fingerprint
    fp = {k: v for k, v in msgspec.structs.asdict(given).items() if v is not None} \
        if isinstance(given, Fingerprint) else {}
    fp.setdefault("device", env.device)
    if (fp.get("device") or "cpu") != "cpu":
        fp.setdefault("gpu_name", env.device_name)
    else:
        fp.setdefault("cpu_model", env.device_name)
    for key in ("torch", "cuda", "python", "cpu_count", "torch_threads"):
        fp.setdefault(key, getattr(env, key))
    fp.setdefault("argv", list(report.argv))
    return fp


@dataclass
class Difference:
    key: str
    what: str
    base: object
    current: object
    invalidating: bool

    def text(self) -> str:
        return f"different {self.what}: baseline {self.base!r}, current {self.current!r}"


def differences(base: Report, current: Report) -> list[Difference]:
    """Every fact two reports both record and that differs (fingerprints as :func:`of` reads them)."""
    a, b = of(base), of(current)
    out = []
    for key, what in FACTS:
        if a.get(key) is None or b.get(key) is None or a.get(key) == b.get(key):
            continue
        out.append(Difference(key, what, a.get(key), b.get(key), key in INVALIDATING))
    return out
