"""Planted: one worker cannot keep up with a slow dataset (threads and workers fit the cores).

advise-expect: DL001 exclusive
"""
import time

import torch
from torch.utils.data import DataLoader, Dataset

from _common import train_forever


class SlowShards(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.randn(64), torch.randn(1)


if __name__ == "__main__":
    torch.set_num_threads(1)  # the worker gets the other core: no oversubscription
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    loader = DataLoader(SlowShards(), batch_size=32, num_workers=1, persistent_workers=True)
    train_forever(model, loader, torch.optim.SGD(model.parameters(), lr=0.01))
