"""## What it does
Finds `torch.nn.DataParallel` driving several GPUs from one process.

It recommends `DistributedDataParallel` instead (one process per GPU).

It is recognised in the trace of one process by its module (`nn.Module: DataParallel_0` when
the trace has modules or stacks, or a frame of `torch/nn/parallel/data_parallel.py`), and
by what it does: kernels on two or more devices from a single process with no collectives of
a process group. `DistributedDataParallel` is not `DataParallel`, and a single device is not
reported (there `DataParallel` only calls the module).

## Why is this bad?
Every step `DataParallel` copies the whole model from GPU 0 to the other GPUs, scatters the
batch from GPU 0, runs the replicas in Python threads that share one GIL, then gathers the
outputs and sums the gradients on GPU 0 again. GPU 0 carries more memory and work than the
others, and the threads contend for the interpreter: PyTorch's own documentation recommends
`DistributedDataParallel` "even if there is only a single node", which all-reduces gradients
while the backward pass runs and keeps each GPU in its own process.

## Example
```python
model = torch.nn.DataParallel(model).cuda()
for x, y in loader:
    loss = loss_fn(model(x.cuda()), y.cuda())
```

Use instead:
```python
# torchrun --nproc_per_node NUM_GPUS train.py
dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
model = DistributedDataParallel(model.cuda(local_rank), device_ids=[local_rank])
loader = DataLoader(dataset, batch_size=B // world_size, sampler=DistributedSampler(dataset))
```

## Fix safety
Display-only: moving to one process per GPU changes how the script is launched, how data is
sharded (a `DistributedSampler`), and where logging and checkpointing run (rank 0 only); the
per-process batch becomes `B / world_size` for the same global batch.

## Options
This rule has no options.
"""

from __future__ import annotations

import re
from typing import Iterator

from advisor.profile import Profile

from .registry import Finding, Fix, rule

_MODULE = re.compile(r"(^|[^A-Za-z])DataParallel(_\d+)?$|nn\.Module: DataParallel|torch/nn/parallel/(data_parallel|parallel_apply)\.py")
_COLLECTIVE = re.compile(r"nccl|rccl", re.IGNORECASE)


@rule(code="PAR003", name="data-parallel")
def check(profile: Profile) -> Iterator[Finding]:
    kernels = profile.kernels
    if not len(kernels):
        return
    devices = sorted(int(d) for d in kernels["device"].dropna().unique())
    if len(devices) < 2:
        return
    named = _names_data_parallel(profile)
    collectives = bool(kernels["name"].str.contains(_COLLECTIVE).any())
    if not named and collectives:
        return  # several devices with a process group: not DataParallel's signature
    per_device = kernels.groupby("device")["dur_us"].sum()
    first = per_device.get(devices[0], 0.0)
    rest = per_device.drop(devices[0]).mean() if len(per_device) > 1 else 0.0
    yield Finding(
        title=f"DataParallel drives {len(devices)} GPUs from one process: use DistributedDataParallel",
        summary=(f"One process runs kernels on GPUs {', '.join(map(str, devices))}"
                 f"{' through nn.DataParallel' if named else ' with no process group'}; GPU {devices[0]} "
                 f"carries {first / 1e3:,.1f} ms of kernels against {rest / 1e3:,.1f} ms on the others (mean), and "
                 "the model is copied to every GPU each step."),
        severity="high",
        evidence={"devices": devices, "module_seen": named, "kernel_ms_by_device":
                  {str(int(d)): round(float(v) / 1e3, 1) for d, v in per_device.items()}},
        fix=Fix.manual(
            "Run one process per GPU with DistributedDataParallel (torchrun --nproc_per_node N)",
            ("# torchrun --nproc_per_node N train.py\n"
             "dist.init_process_group(\"nccl\"); local_rank = int(os.environ[\"LOCAL_RANK\"])\n"
             "torch.cuda.set_device(local_rank)\n"
             "model = DistributedDataParallel(model.cuda(local_rank), device_ids=[local_rank])  # was nn.DataParallel(model)\n"
             "loader = DataLoader(dataset, batch_size=B // world_size, sampler=DistributedSampler(dataset))"),
        ),
    )


def _names_data_parallel(profile: Profile) -> bool:
    for frame in (profile.python, profile.annotations, profile.ops):
        if len(frame) and frame["name"].str.contains(_MODULE).any():
            return True
    return False
