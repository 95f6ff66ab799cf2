"""advise: an automatic optimization advisor for PyTorch training scripts.

The only API a training script ever needs is :func:`step`, an explicit step marker for loops
the probe cannot see (no ``torch.optim`` optimizer, no DataLoader). Outside the probe it is a
no-op, so scripts keep working without ``advise``.
"""

from typing import Protocol

__version__ = "0.1.0"


class _Clock(Protocol):
    def explicit_step(self, samples: int | None = None) -> None: ...


_clock: _Clock | None = None  # set by advisor.probe.bootstrap inside a probed child process


def step(samples: int | None = None) -> None:
    """Mark the end of one training step; `samples` is the batch size when the probe can't infer it."""
    if _clock is not None:
        _clock.explicit_step(samples)
