"""The cores one rank of a job may plan its loader workers and threads for: a leaf the vocabulary's
ladders, the rules and the experiments read alike."""

from __future__ import annotations

import os
from typing import Protocol


class CpuCounts(Protocol):
    """What a run says of its CPUs (:class:`advisor.run_dir.seen.Env` has them; this leaf cannot import it)."""

    @property
    def cpu_count(self) -> int | None: ...
    @property
    def cpu_usable(self) -> int | None: ...
    @property
    def local_world_size(self) -> int | None: ...


def cores_per_rank(env: CpuCounts) -> int:
    """The cores one rank may plan for (`env`: the run's :class:`advisor.run_dir.seen.Env`): those its affinity mask allows (`cpu_usable`: a job
    scheduler that binds each rank to its own cores has split them already), else the node's,
    shared by the ranks on it (workers and threads are a per-node budget: 2 ranks x 4 workers on
    2 cores is 8 workers)."""
    cores = int(env.cpu_count or os.cpu_count() or 1)
    usable = int(env.cpu_usable or cores)
    if usable < cores:  # bound to a subset: that subset is this rank's
        return max(1, usable)
    return max(1, cores // int(env.local_world_size or 1))


def cores_said(env: CpuCounts) -> str:
    """Where :func:`cores_per_rank`'s figure comes from, in words."""
    cores = int(env.cpu_count or 0)
    usable, ranks = int(env.cpu_usable or cores), int(env.local_world_size or 1)
    if usable and cores and usable < cores:
        return f"the {usable} CPU{'s' if usable > 1 else ''} this rank may use (its affinity mask, of {cores})"
    if ranks > 1:
        return f"{cores_per_rank(env)} CPUs: the node's {cores} shared by its {ranks} ranks"
    return f"the node's {cores} CPUs"
