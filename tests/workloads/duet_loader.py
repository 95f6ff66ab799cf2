"""A loop whose DataLoader workers log when they load: a duet's held side must load nothing.

Each sample takes about 1 ms in a worker (a sleep) and appends `<pid> <time.monotonic()>` to the
file named by --log, so a test can see when each side's workers ran. A deep prefetch (50 batches
a worker) keeps them loading for most of a second after the loop stops asking.
"""
import argparse
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--log", required=True)
args = parser.parse_args()


class Logged(Dataset):
    def __len__(self):
        return 100000

    def __getitem__(self, i):
        time.sleep(0.001)
        with open(args.log, "a") as f:
            f.write(f"{os.getpid()} {time.monotonic()}\n")
        return torch.randn(32), torch.randn(1)


if __name__ == "__main__":
    loader = DataLoader(Logged(), batch_size=8, num_workers=2, persistent_workers=True, prefetch_factor=50)
    model = torch.nn.Linear(32, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(1000):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
