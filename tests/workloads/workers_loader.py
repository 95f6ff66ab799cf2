"""A DataLoader with worker processes (and persistent workers) that must be reaped."""
import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 100000

    def __getitem__(self, i):
        return torch.randn(32), torch.randn(1)


if __name__ == "__main__":
    loader = DataLoader(Slow(), batch_size=16, num_workers=2, persistent_workers=True)
    print(f"MAINPID={os.getpid()}", file=sys.stderr, flush=True)
    model = torch.nn.Linear(32, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(1000):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
