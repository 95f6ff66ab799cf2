"""A loader that already has workers (4 by default) whose samples wait on I/O (2 ms each, as reading
files does), batch 32, feeding a small MLP: its workers pace the steps, and waiting workers need no
core of their own. Prints one timing line per step (issue 65's first shape)."""
import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=4)
parser.add_argument("--item-ms", type=float, default=2.0)
parser.add_argument("--iters", type=int, default=100000)
args = parser.parse_args()


class Reads(Dataset):
    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        time.sleep(args.item_ms / 1000)
        g = torch.Generator().manual_seed(i)
        x = torch.randn(64, generator=g)
        return x, x[:4].sum().unsqueeze(0)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Reads(), batch_size=32, shuffle=True, num_workers=args.workers)
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
