"""Starting a torch.profiler in the script's process without writing into the script's log.

Kineto prints status lines (USDT profiler_start, STAGE ...) into the script's stderr at its default
level, which it reads once, when the first profiler starts. The user's own KINETO_LOG_LEVEL wins,
and the variable is gone again before the script's next line.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def starting() -> Iterator[None]:
    """Around a torch.profiler's construction and start (the window's, and the memory-only step's)."""
    quiet = "KINETO_LOG_LEVEL" not in os.environ
    if quiet:
        os.environ["KINETO_LOG_LEVEL"] = "6"
    try:
        yield
    finally:
        if quiet:
            os.environ.pop("KINETO_LOG_LEVEL", None)
