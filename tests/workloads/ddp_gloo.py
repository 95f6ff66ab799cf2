"""DistributedDataParallel on CPU (gloo), as torchrun launches it: one probe per rank.

`--crash-rank R --crash-at N`: rank R raises at step N. `--sleep-rank R --sleep-ms MS`: rank R
computes MS longer each step (a straggler). `--item-ms MS`: every sample takes MS to load in a
DataLoader with no workers (the ranks starve); `--no-loader-rank R`: rank R reads the same slow
items in a loop of its own, no DataLoader (a loader fix cannot be switched there). `--slurm`: the rank and world size come from
SLURM_PROCID / SLURM_NTASKS, as a script started by `srun` with no launcher reads them (the
address from MASTER_ADDR / MASTER_PORT, which the job script sets)."""
import os
import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("--crash-rank", type=int, default=-1)
parser.add_argument("--crash-at", type=int, default=0)
parser.add_argument("--sleep-rank", type=int, default=-1)
parser.add_argument("--sleep-ms", type=float, default=0.0)
parser.add_argument("--item-ms", type=float, default=0.0)
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--slurm", action="store_true")
parser.add_argument("--no-loader-rank", type=int, default=-1)
args = parser.parse_args()


class SlowData(torch.utils.data.Dataset):
    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        time.sleep(args.item_ms / 1000)
        return torch.randn(32)



if args.slurm:
    dist.init_process_group("gloo", rank=int(os.environ["SLURM_PROCID"]), world_size=int(os.environ["SLURM_NTASKS"]))
else:
    dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
model = DDP(torch.nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.utils.data.DataLoader(SlowData(), batch_size=16) if args.item_ms else None
loader = iter(data) if data is not None else None
if loader is not None and rank == args.no_loader_rank:
    loader = (torch.stack([SlowData()[i] for i in range(16)]) for _ in iter(int, 1))
for step in range(args.steps):
    if rank == args.crash_rank and step == args.crash_at:
        raise RuntimeError(f"planted failure on rank {rank} at step {step}")
    x = next(loader) if loader is not None else torch.randn(16, 32)
    loss = model(x).pow(2).mean()
    if rank == args.sleep_rank:
        time.sleep(args.sleep_ms / 1000)
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
