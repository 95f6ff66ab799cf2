"""A loop with two bottlenecks: a DataLoader (0 workers by default) whose samples take about 1 ms
each to decode, feeding an FP32 MLP trained with AdamW. On a 2-core machine its best worker count
is not its largest (issue 54's script). Prints one timing line per step."""
import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--iters", type=int, default=100000)
args = parser.parse_args()


class Decoded(Dataset):
    """Each sample 'decoded' in Python: about 1 ms of CPU per sample."""

    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(512, generator=g)
        end = time.perf_counter() + 0.001
        acc = 0
        while time.perf_counter() < end:
            acc += 1
        return x, x[:16].sum().unsqueeze(0)


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                            torch.nn.Linear(1024, 1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
loader = DataLoader(Decoded(), batch_size=args.batch_size, shuffle=True, num_workers=args.workers)

t0 = time.perf_counter()
for it, (x, y) in enumerate(loader):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    t1 = time.perf_counter()
    print(f"iter {it}: loss {loss.item():.4f}, time {(t1 - t0) * 1e3:.2f}ms", flush=True)
    t0 = t1
    if it + 1 >= args.iters:
        break
