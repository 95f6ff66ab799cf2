"""Planted: I/O-bound input pipeline (each sample 'reads a file' for 1.5 ms), num_workers=0.

advise-expect: DL001 exclusive
"""
import time

import torch
from torch.utils.data import DataLoader, Dataset

from _common import train_forever


class RemoteFiles(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        time.sleep(0.0015)  # stands for a network or disk read
        return torch.randn(64), torch.randn(1)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    loader = DataLoader(RemoteFiles(), batch_size=32, shuffle=True)
    train_forever(model, loader, torch.optim.SGD(model.parameters(), lr=0.01))
