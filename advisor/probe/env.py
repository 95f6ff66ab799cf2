"""The child's view of its environment: versions, device, and the backend flags the script set."""

from __future__ import annotations

import os
import platform
import socket
import sys

import torch
import psutil

from advisor.job.rank import rank_info
from advisor.run_dir.seen import Env


def collect_env(device: str | None) -> Env:
    """Describe the run; touches CUDA only if the script already initialised it."""
    env = {
        "python": platform.python_version(),
        "torch": str(torch.__version__),  # a TorchVersion: a str to the account
        "cuda": torch.version.cuda,
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "cpu_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "physical_cores": _physical_cores(),
        "torch_threads": torch.get_num_threads(),
        "device": device or "cpu",
        "device_name": platform.processor() or platform.machine(),
        "device_capability": None,
        "device_memory_bytes": None,
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "bf16_supported": None,
        "cuda_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF"),
        **rank_info(),
    }
    if device == "cuda" and torch.cuda.is_initialized():
        env["device_name"] = None
        try:
            env.update(_cuda_env())
        except Exception:  # noqa: BLE001 - a context the script's CUDA error poisoned answers nothing: unknown
            pass
    else:
        env["device_memory_bytes"] = _total_ram()
        env["bf16_supported"] = _cpu_has_fast_bf16()
    return Env.given(**env)


def _cuda_env() -> dict:
    """The device's own fields: each a CUDA call, so all or none."""
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return {"device_name": props.name, "device_capability": f"{props.major}.{props.minor}",
            "device_memory_bytes": int(props.total_memory), "cudnn": torch.backends.cudnn.version(),
            "bf16_supported": bool(torch.cuda.is_bf16_supported())}


def memory_stats(device: str | None) -> dict:
    """Peak accelerator memory of the whole run (OOM risk is about the highest point)."""
    if device == "cuda" and torch.cuda.is_initialized():
        free, total = torch.cuda.mem_get_info()
        return {
            "peak_allocated_bytes": int(torch.cuda.max_memory_allocated()),
            "peak_reserved_bytes": int(torch.cuda.max_memory_reserved()),
            "device_total_bytes": int(total),
            "device_free_bytes": int(free),
        }
    return {}


def _physical_cores() -> int | None:
    """Cores without their SMT siblings: intra-op threads beyond them share execution units."""
    try:
        return psutil.cpu_count(logical=False)
    except (OSError, RuntimeError, psutil.Error):  # a /sys or /proc this container hides
        return None


def _total_ram() -> int | None:
    try:
        return int(psutil.virtual_memory().total)
    except (OSError, RuntimeError, psutil.Error):  # a /proc/meminfo this container hides or changed
        return None


def _cpu_has_fast_bf16() -> bool:
    """True when the CPU has native bf16 matmul (AVX512-BF16 / AMX); only then can autocast pay off."""
    try:
        caps = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):  # a torch without it (before 2.0)
        return False
    if sys.platform != "linux":
        return False
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return False
    return caps.startswith("AVX512") and ("avx512_bf16" in flags or "amx_bf16" in flags)
