"""What the parent asks of one probed run (the script, its steps, the run dir, the limits), read
by the runner and the job's shapes alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ProbeConfig:
    script: str  # a path, or with `module` a module name (python -m)
    args: list[str] = field(default_factory=list)
    module: bool = False
    out: Path = Path("advise-report")
    warmup: int = 5
    steps: int = 20
    profile_steps: int = 5
    timeout_s: float = 600.0
    sample_interval_s: float = 0.1
    overrides: dict = field(default_factory=dict)
    arms: bool = False  # after the window the child waits for plan files and measures arms itself
    plan_timeout_s: float = 600.0  # how long the child waits for a plan before it finishes
    arms_budget_s: float = 900.0  # the arms' time, from the "window-done" line: its end stops them, not a timeout
    nproc: int = 1  # ranks started through torch.distributed.run (--standalone: a free rendezvous port)
    memory_budget_bytes: int | None = None  # --memory-budget (None: the device's capacity)
