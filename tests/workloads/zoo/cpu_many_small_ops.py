"""Planted: a deep stack of tiny residual blocks on a CPU: hundreds of microsecond-sized ops a step.

Each op is a few microseconds of arithmetic and about as much dispatch; the step is
framework time. The optimizer is already foreach (one op per group, not per parameter).

advise-expect: CPU001 exclusive
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from _common import train_forever


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.nn.functional.gelu(self.fc(self.norm(x))) * 0.5


if __name__ == "__main__":
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 16), torch.randn(4096, 16))
    model = nn.Sequential(*[Block(16) for _ in range(48)])
    loader = DataLoader(data, batch_size=8, shuffle=True)
    train_forever(model, loader, torch.optim.SGD(model.parameters(), lr=0.01, foreach=True))
