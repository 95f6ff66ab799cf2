"""Planted: 4 busy DataLoader workers beside the trainer's intra-op threads, on a CPU.

advise-expect: DL003 exclusive
"""
import os

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

from _common import train_forever

CORES = os.cpu_count() or 2


class Augmented(Dataset):
    def __init__(self):
        self.w = torch.randn(256, 256) / 16

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        x = torch.randn(256)
        for _ in range(40):  # real CPU work in every worker: they stay behind, always busy
            x = torch.tanh(x @ self.w)
        return x, x[:1].clone()


if __name__ == "__main__":
    torch.set_num_threads(CORES)  # every core for compute, and workers on top
    torch.manual_seed(0)
    layers = [nn.Linear(256, 512), nn.ReLU()]
    for _ in range(30):  # each matmul ~67 MFLOP: under PR001's floor on a CPU with native bf16
        layers += [nn.Linear(512, 512), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(512, 1))
    # steps long enough (~100 ms) that the measured window spans several 100 ms sampler ticks: with
    # ~15 ms steps the window was shorter than the 3 ticks a mean rests on, and the ticks around it
    # read the CPU 87-89% busy, against DL003's 85% (a CI run once read less)
    loader = DataLoader(Augmented(), batch_size=128, num_workers=CORES + 2, persistent_workers=True)
    train_forever(model, loader, torch.optim.SGD(model.parameters(), lr=0.01))
