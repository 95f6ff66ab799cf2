"""DistributedDataParallel on CPU (gloo) with ranks the script starts itself through
`torch.multiprocessing.spawn`, as many tutorials (and Lightning's ddp_spawn) do.

`--sleep-rank R --sleep-ms MS`: rank R computes MS longer each step (a straggler).
`--item-ms MS`: every sample takes MS to load in the DataLoader (no workers): the ranks starve."""
import argparse
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP


class SlowData(torch.utils.data.Dataset):
    def __init__(self, item_ms: float):
        self.item_ms = item_ms

    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        time.sleep(self.item_ms / 1000)
        return torch.randn(32)


def train(rank: int, world: int, port: int, sleep_rank: int, sleep_ms: float, item_ms: float, steps: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(rank)
    model = DDP(torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.DataLoader(SlowData(item_ms), batch_size=16) if item_ms else None
    loader = iter(data) if data is not None else None
    for _ in range(steps):
        x = next(loader) if loader is not None else torch.randn(16, 32)
        loss = model(x).pow(2).mean()
        if rank == sleep_rank:
            time.sleep(sleep_ms / 1000)
        opt.zero_grad()
        loss.backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--nprocs", type=int, default=2)
    parser.add_argument("--sleep-rank", type=int, default=-1)
    parser.add_argument("--sleep-ms", type=float, default=0.0)
    parser.add_argument("--item-ms", type=float, default=0.0)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(train, args=(args.nprocs, port, args.sleep_rank, args.sleep_ms, args.item_ms, args.steps), nprocs=args.nprocs)
    print("ALL RANKS JOINED")
