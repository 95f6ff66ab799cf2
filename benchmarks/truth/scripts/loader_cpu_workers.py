"""A loader that already has workers (2 by default) whose samples are decoded on the CPU (about
0.5 ms of Python each), batch 32, feeding an FP32 MLP: on 2 cores the workers and the step's
threads share the cores, so more workers than cores cannot help and fewer may. Prints one timing
line per step (issue 65's second shape)."""
import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--item-ms", type=float, default=0.5)
parser.add_argument("--iters", type=int, default=100000)
args = parser.parse_args()


class Decoded(Dataset):
    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(256, generator=g)
        end = time.perf_counter() + args.item_ms / 1000
        acc = 0
        while time.perf_counter() < end:
            acc += 1
        return x, x[:8].sum().unsqueeze(0)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = DataLoader(Decoded(), batch_size=32, shuffle=True, num_workers=args.workers)
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
