"""Memory budgets and where a run's peak memory goes: torch-free arithmetic the CLI, the rules and
the reports share.

The probe records, per measurement, the peak (``torch.cuda.max_memory_allocated`` reset per
window on GPU; the kernel's resident-set high-water mark ``VmHWM``, reset per window through
``/proc/self/clear_refs``, on CPU) and, from the live model and optimizer, the bytes held by
parameters, gradients and optimizer state. What is left of the peak is activations and other
buffers. Sharding savings are estimates computed from that breakdown, never measurements.
"""

from __future__ import annotations

import re

UNITS = {"": 1, "B": 1, "K": 1000, "KB": 1000, "M": 1000**2, "MB": 1000**2, "G": 1000**3, "GB": 1000**3,
         "T": 1000**4, "TB": 1000**4, "KIB": 1024, "MIB": 1024**2, "GIB": 1024**3, "TIB": 1024**4}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*$")

BASIS_WORDS = {
    "cuda-max-allocated": "torch.cuda.max_memory_allocated, reset at the start of each measurement",
    "cpu-allocator": "the CPU allocator: the tensors alive across a step (parameters, gradients, optimizer "
                     "state) plus the most one untimed step allocated on top (the profiler's memory events)",
    "rss-high-water": "the process's resident-set high-water mark (VmHWM), reset at the start of each "
                      "measurement; includes the Python interpreter and torch itself",
}
PARTS = ("parameters_bytes", "gradients_bytes", "optimizer_state_bytes", "runtime_bytes", "activations_other_bytes")
PART_WORDS = {"parameters_bytes": "parameters", "gradients_bytes": "gradients", "optimizer_state_bytes": "optimizer state",
              "runtime_bytes": "interpreter and torch", "activations_other_bytes": "activations and other"}

DEVICE_MARGIN = 0.10  # of the device's memory, kept free by a batch ladder (experiments.judge.usable_budget)


def parse_size(text: str) -> int:
    """`160MB`, `20GiB`, `1.5G`, `4096` (bytes) as bytes; ValueError with a one-line reason otherwise."""
    match = _SIZE.match(str(text))
    unit = match.group(2).upper() if match else ""
    if not match or unit not in UNITS:
        raise ValueError(f"{text!r} is not a size (e.g. 160MB, 20GiB)")
    value = float(match.group(1)) * UNITS[unit]
    if value < 1:
        raise ValueError(f"{text!r} is not a positive size")
    return int(value)


def breakdown(peak_bytes: float | None, tensors: dict | None) -> dict | None:
    """The peak split into parameters, gradients, optimizer state, the runtime (CPU: the process
    before the script ran) and the rest (activations and other buffers); None without both."""
    if not peak_bytes or not tensors:
        return None
    out = {key: int(tensors.get(key) or 0) for key in PARTS[:4]}
    out["activations_other_bytes"] = max(0, int(peak_bytes) - sum(out.values()))
    return out


def sharding_estimate(parts: dict, ranks: int) -> dict:
    """Bytes per rank each ZeRO-style stage would save over `ranks` ranks (FSDP2 ``fully_shard``),
    and what optimizer-state offload saves on one device: estimates from the breakdown."""
    n = max(1, int(ranks))
    keep = (n - 1) / n
    opt, grads, params = parts.get("optimizer_state_bytes", 0), parts.get("gradients_bytes", 0), parts.get("parameters_bytes", 0)
    return {"ranks": n, "zero1_saved_bytes": int(opt * keep), "zero2_saved_bytes": int((opt + grads) * keep),
            "zero3_saved_bytes": int((opt + grads + params) * keep), "offload_saved_bytes": int(opt)}


def change_frac(baseline: float | None, candidate: float | None) -> float | None:
    """candidate / baseline - 1 (negative: less memory), or None when either is unknown."""
    if not baseline or candidate is None:
        return None
    return float(candidate) / float(baseline) - 1.0
