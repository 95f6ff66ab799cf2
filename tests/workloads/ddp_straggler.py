"""Two-rank DDP on CPU (gloo) where each rank exports its own profiler trace, case by case.

    python -m torch.distributed.run --nproc_per_node 2 ddp_straggler.py OUT_DIR [--case NAME:SLEEP_MS:BATCH_RANK1 ...]

Each case trains the same model for `--steps` steps under its own profiler and writes
OUT_DIR/NAME/trace_rank{0,1}.json. In a case, rank 1 sleeps SLEEP_MS more per step before
backward (a slower rank: the other waits for it in the gradient all-reduce) and takes batches
of BATCH_RANK1 samples (rank 0: 32; uneven data). Several cases share one launch, so a test
pays torchrun's start-up once. Default: one case, `run:0:32` (both ranks alike).
"""

import argparse
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--case", action="append", default=None, help="NAME:SLEEP_MS:BATCH_RANK1")
parser.add_argument("--steps", type=int, default=12)
args = parser.parse_args()

torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)

for case in args.case or ["run:0:32"]:
    name, sleep_ms, batch_rank1 = case.split(":")
    batch = int(batch_rank1) if rank == 1 else 32
    sleep_s = float(sleep_ms) / 1000 if rank == 1 else 0.0
    x, y = torch.randn(batch, 64), torch.randn(batch, 1)
    folder = Path(args.out) / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"trace_rank{rank}.json"
    schedule = torch.profiler.schedule(wait=2, warmup=2, active=args.steps - 4)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule,
                                record_shapes=True, with_flops=True,
                                on_trace_ready=lambda p, path=path: p.export_chrome_trace(str(path))) as prof:
        for step in range(args.steps):
            loss = torch.nn.functional.mse_loss(model(x), y)
            if sleep_s:
                time.sleep(sleep_s)  # the slow rank: more work before the collective
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
dist.destroy_process_group()
