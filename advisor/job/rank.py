"""Which rank of which job this process is, from what the job's launcher set: no flag from the user.

torchrun (and ``torch.distributed.run``, the elastic agent) sets ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK`` (the node), ``TORCHELASTIC_RUN_ID`` and the
rendezvous store's ``MASTER_ADDR``/``MASTER_PORT`` (``TORCHELASTIC_USE_AGENT_STORE=True``: the
agent hosts that store for the whole job). ``srun`` sets ``SLURM_PROCID``, ``SLURM_NTASKS``
(``SLURM_STEP_NUM_TASKS`` for the step), ``SLURM_LOCALID``, ``SLURM_NODEID``, ``SLURM_JOB_ID``
and ``SLURM_STEP_ID``. torchrun's variables win (``srun torchrun ...``: the srun task is a node,
torchrun's workers are the ranks). A SLURM batch script itself (no ``SLURM_STEP_ID``: not a task
srun started) is one process, whatever ``SLURM_NTASKS`` says of the allocation.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class JobRank:
    """This process's place in its job (a single process: rank 0 of 1)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int | None = None  # ranks on this node (None: not said)
    node: int = 0  # the node's rank (GROUP_RANK, SLURM_NODEID)
    launcher: str | None = None  # "torchrun" | "slurm" | None (one process)
    job_id: str | None = None  # TORCHELASTIC_RUN_ID (+ restart), SLURM_JOB_ID.SLURM_STEP_ID
    master_addr: str | None = None
    master_port: int | None = None
    agent_store: bool = False  # MASTER_ADDR:MASTER_PORT is torchrun's agent store, alive for the whole job

    @property
    def multi(self) -> bool:
        return self.world_size > 1

    @property
    def suffix(self) -> str:
        """``.rank1`` for rank 1 of a multi-rank job, '' for a single process (the run dir's file names)."""
        return f".rank{self.rank}" if self.multi else ""

    def describe(self) -> str:
        return f"rank {self.rank} of {self.world_size} ({self.launcher}, node {self.node})"


def _int(env: Mapping[str, str], *names: str) -> int | None:
    """The first of `names` set to a number (SLURM's per-node counts read ``4(x2)``: 4 on each of 2 nodes)."""
    for name in names:
        found = re.match(r"\d+", (env.get(name) or "").strip())
        if found:
            return int(found.group())
    return None


def detect(env: Mapping[str, str] | None = None) -> JobRank:
    """The job this process belongs to, from `env` (default: os.environ)."""
    env = os.environ if env is None else env
    addr, port = env.get("MASTER_ADDR") or None, _int(env, "MASTER_PORT")
    rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
    if rank is not None and world is not None:
        run_id = env.get("TORCHELASTIC_RUN_ID")
        job_id = f"{run_id}.{env.get('TORCHELASTIC_RESTART_COUNT') or 0}" if run_id else None
        return JobRank(rank=rank, world_size=world, local_rank=_int(env, "LOCAL_RANK") or 0,
                       local_world_size=_int(env, "LOCAL_WORLD_SIZE"), node=_int(env, "GROUP_RANK") or 0,
                       launcher="torchrun" if run_id else "env", job_id=job_id, master_addr=addr, master_port=port,
                       agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE") == "True")
    rank, world = _int(env, "SLURM_PROCID"), _int(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS")
    if rank is not None and world is not None and env.get("SLURM_STEP_ID") not in (None, "", "batch"):
        per_node = _int(env, "SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
        job = env.get("SLURM_JOB_ID")
        return JobRank(rank=rank, world_size=world, local_rank=_int(env, "SLURM_LOCALID") or 0,
                       local_world_size=per_node, node=_int(env, "SLURM_NODEID") or 0, launcher="slurm",
                       job_id=f"{job}.{env['SLURM_STEP_ID']}" if job else None, master_addr=addr, master_port=port)
    return JobRank()


def rank_suffix() -> str:
    """``.rank1`` for rank 1 of a multi-rank job (any launcher), '' for a single process: the run dir's file names."""
    return detect().suffix


def rank_info(env: Mapping[str, str] | None = None) -> dict:
    """rank / local_rank / world_size / local_world_size / node as the probe's env records them (None: one process)."""
    job = detect(env)
    if job.launcher is None:
        return {"rank": None, "local_rank": None, "world_size": None, "local_world_size": None}
    return {"rank": job.rank, "local_rank": job.local_rank, "world_size": job.world_size,
            "local_world_size": job.local_world_size, "node": job.node}
