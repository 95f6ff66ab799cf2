"""A starved input pipeline: each sample costs ~1.5 ms of I/O-like wait (as reading files does)
and the DataLoader has no workers, so the model waits on data most of each step (`--item-ms`: the
wait per sample)."""
import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


class SlowReads(Dataset):
    item_s = 0.0015

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        time.sleep(self.item_s)
        return torch.randn(64), torch.randn(1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--item-ms", type=float, default=1.5)
    args = parser.parse_args()
    SlowReads.item_s = args.item_ms / 1000
    torch.manual_seed(0)
    loader = DataLoader(SlowReads(), batch_size=16, num_workers=args.workers)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
