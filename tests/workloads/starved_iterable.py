"""A starved IterableDataset: the in-process arms cannot re-feed it from a sampler, so its
DataLoader fix must fall back to fresh runs of the script (and those must not wait for a plan)."""
import time

import torch
from torch.utils.data import DataLoader, IterableDataset


class SlowStream(IterableDataset):
    def __iter__(self):
        while True:
            time.sleep(0.0015)
            yield torch.randn(64), torch.randn(1)


if __name__ == "__main__":
    torch.manual_seed(0)
    loader = DataLoader(SlowStream(), batch_size=16)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
