"""Planted: zero_grad(set_to_none=False) on wide layers and a small batch: every step first
writes zeros over 16M gradient values, then backward adds into them instead of writing them.

advise-expect: OPT002 exclusive
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(2048, 2048), torch.randn(2048, 1))
    model = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                          nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 1))
    loader = DataLoader(data, batch_size=4, shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=True)
    for epoch in range(1000):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad(set_to_none=False)
            loss.backward()
            opt.step()
