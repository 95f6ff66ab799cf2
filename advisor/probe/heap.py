"""The C heap the arms run on, made the script's own again after the profiled window.

The profiled window's buffers (Kineto's events, shapes, stacks and memory events: 1.5 GB for five
steps of a small GPT-2) are freed when the probe collects its garbage at the window's end. They
lay among memory still in use, so they leave a hole, and glibc serves the script's later tensors
from that hole instead of mapping them anew: the arms then ran without the page faults the script
pays on its own. A Hugging Face Accelerate language model took 35k minor faults a step alone (its
32 MiB logits and their gradients mapped and unmapped each step) and none in the arms' windows:
its baseline ran 240 ms a step against 275 ms alone, its bf16 arm 118 ms against 151 ms, and the
claim read 2.08x where the same fix by hand reads 1.84x.

:func:`settle` collects the garbage, hands the freed pages back to the kernel (``malloc_trim``)
and then takes the large free blocks left in the heap itself, untouched (``malloc`` of a block
the trim released costs address space, not memory): the script's large tensors are mapped anew as
they are without advise. Where the C library is not glibc (no ``mallinfo2``), the garbage is
collected and trimmed only.
"""

from __future__ import annotations

import ctypes
import gc

# Free blocks at least this large are taken (a tensor this size or larger would reuse them); the
# smaller ones are the fragmentation any process has.
PLUG_MIN = 128 << 10
_PLUG_SIZES = (32 << 20, 4 << 20, 512 << 10, PLUG_MIN)
_plugs: list[int] = []  # the blocks taken, held (never written) for the rest of the process


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _libc() -> ctypes.CDLL | None:
    try:
        c = ctypes.CDLL(None)
        c.mallinfo2.restype = _MallInfo2
        c.malloc.restype = ctypes.c_void_p
        c.malloc.argtypes = [ctypes.c_size_t]
        c.malloc_trim.argtypes = [ctypes.c_size_t]
        return c
    except (OSError, AttributeError):  # not glibc, or one older than 2.33
        return None


def free_in_bins(c: ctypes.CDLL) -> int:
    """Bytes free inside the heaps, less the releasable top: the blocks a new allocation may reuse."""
    info = c.mallinfo2()
    return max(0, int(info.fordblks) - int(info.keepcost))


def settle() -> int:
    """Collect the probe's garbage and give its heap space back; the bytes of free blocks taken."""
    gc.collect()
    c = _libc()
    if c is None:
        return 0
    c.malloc_trim(0)
    taken, free = 0, free_in_bins(c)
    for size in _PLUG_SIZES:
        while free >= size:
            block = c.malloc(size)
            if not block:
                return taken
            after = free_in_bins(c)
            if free - after < size // 2:  # not a free block: the top or a fresh mapping
                c.free(ctypes.c_void_p(block))
                break
            _plugs.append(block)
            taken, free = taken + size, after
    return taken
