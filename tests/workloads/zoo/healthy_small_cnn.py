"""Healthy control: a small CNN on in-memory images, Adam, cross-entropy.

advise-expect: none
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from _common import train_forever

if __name__ == "__main__":
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(2048, 1, 28, 28), torch.randint(0, 10, (2048,)))
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(16 * 7 * 7, 10))
    loader = DataLoader(data, batch_size=64, shuffle=True)
    train_forever(model, loader, torch.optim.Adam(model.parameters(), lr=1e-3), loss_fn=nn.functional.cross_entropy)
