"""Planted: Adam on a CPU in its default single-tensor form, over 8M parameters and a small batch.

On a CPU torch does not default to foreach or fused: each parameter's update is a dozen
separate passes over its memory, and the update takes a large share of the step.

advise-expect: CPU002 exclusive
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from _common import train_forever

if __name__ == "__main__":
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(2048, 1024), torch.randn(2048, 1024))
    model = nn.Sequential(*[m for _ in range(8) for m in (nn.Linear(1024, 1024), nn.ReLU())])
    loader = DataLoader(data, batch_size=16, shuffle=True)
    train_forever(model, loader, torch.optim.Adam(model.parameters(), lr=1e-4))
