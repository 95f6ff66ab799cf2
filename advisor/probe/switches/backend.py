"""Matmul precision, cudnn.benchmark and intra-op threads."""

from __future__ import annotations

import os
from typing import Any

import torch


def tf32_blocked() -> bool:
    """NVIDIA_TF32_OVERRIDE=0 makes cuBLAS/cuDNN ignore torch's TF32 setting: the switch does nothing.

    On an H100 image a TF32 arm measured 1.00x on an fp32-matmul-bound MLP; a precision the
    libraries ignore must read "not applied", not "no gain"."""
    return os.environ.get("NVIDIA_TF32_OVERRIDE") == "0"


class BackendSwitch:
    """Matmul precision, cudnn.benchmark and intra-op threads: set, and restored after."""

    def __init__(self) -> None:
        self.saved: dict[str, Any] = {}
        self.threads: int | None = None  # held while on
        self.applied: dict = {}

    def install(self) -> None:
        """The thread count holds against the script's own ``torch.set_num_threads``: a script
        that sets threads after start-up (cpu_one_thread.py sets 1) would otherwise undo the
        override (a fresh run read 1.09x where the arm, switched after that call, read 1.79x).
        DataLoader workers (other processes) still set their own."""
        original, pid, switch = torch.set_num_threads, os.getpid(), self

        def set_num_threads(nthreads: int) -> None:
            if switch.threads is None or os.getpid() != pid:
                return original(nthreads)
            switch.applied["torch_threads_script_asked"] = int(nthreads)  # held at the experiment's value

        self._set_threads = original
        torch.set_num_threads = set_num_threads

    def on(self, overrides: dict, applied: dict, *, live: bool = True) -> None:
        self.applied = applied
        if "float32_matmul_precision" in overrides:
            self.saved["float32_matmul_precision"] = torch.get_float32_matmul_precision()
            torch.set_float32_matmul_precision(overrides["float32_matmul_precision"])
            if not tf32_blocked():
                applied["float32_matmul_precision"] = torch.get_float32_matmul_precision()
        if overrides.get("cudnn_benchmark"):
            self.saved["cudnn_benchmark"] = torch.backends.cudnn.benchmark
            torch.backends.cudnn.benchmark = True
            applied["cudnn_benchmark"] = bool(torch.backends.cudnn.benchmark)
        if "torch_threads" in overrides:
            self.saved["torch_threads"] = torch.get_num_threads()
            getattr(self, "_set_threads", torch.set_num_threads)(int(overrides["torch_threads"]))
            self.threads = int(overrides["torch_threads"])
            applied["torch_threads"] = torch.get_num_threads()

    def off(self) -> None:
        saved, self.saved, self.threads = self.saved, {}, None
        if "float32_matmul_precision" in saved:
            torch.set_float32_matmul_precision(saved["float32_matmul_precision"])
        if "cudnn_benchmark" in saved:
            torch.backends.cudnn.benchmark = saved["cudnn_benchmark"]
        if "torch_threads" in saved:
            getattr(self, "_set_threads", torch.set_num_threads)(saved["torch_threads"])
