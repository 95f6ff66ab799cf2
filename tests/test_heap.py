"""The heap the arms run on (advisor.probe.heap) against a real glibc heap, in fresh processes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

# A profiler's buffers (200 MiB of heap blocks) freed below memory still in use, then six 32 MiB
# tensors made and dropped, each one's minor page faults counted.
CHILD = textwrap.dedent(
    """
    import ctypes, json, resource, sys
    import torch
    from advisor.probe.heap import _libc, free_in_bins, settle

    c = _libc()
    blocks = [c.malloc(64 << 10) for _ in range(3200)]
    for block in blocks:
        ctypes.memset(block, 1, 64 << 10)
    pin = c.malloc(64 << 10)
    assert pin > max(blocks)
    rss = lambda: int(open("/proc/self/statm").read().split()[1]) * 4096
    held = rss()
    for block in blocks:
        c.free(ctypes.c_void_p(block))
    hole = free_in_bins(c)
    taken = settle() if sys.argv[1] == "settle" else 0
    after = rss()
    faults = []
    for _ in range(6):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t = torch.empty(8 << 20).fill_(1.0)
        del t
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print(json.dumps({"hole": hole, "taken": taken, "left": free_in_bins(c), "faults": faults,
                      "rss_held": held, "rss_after": after}))
    """
)


def _run(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_freed_profilers_hole_serves_no_tensor_once_settled():
    alone, settled = _run("as-is"), _run("settle")
    assert alone["hole"] >= 190 << 20 and settled["hole"] >= 190 << 20
    # as is: the 32 MiB tensors reuse the hole, no page faults after the first (the arms ran so; the
    # hole may run out before the last: other allocations of torch's split it)
    assert sum(f < 100 for f in alone["faults"][1:]) >= 3, alone
    # settled: the hole's blocks taken untouched, each tensor mapped anew as in the script alone
    assert settled["taken"] >= 190 << 20 and settled["left"] < 1 << 20, settled
    assert settled["rss_after"] < settled["rss_held"] - (150 << 20), settled  # address space taken, not memory
    assert min(settled["faults"][1:]) >= 8000, settled
