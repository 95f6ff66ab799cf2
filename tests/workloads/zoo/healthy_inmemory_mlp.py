"""Healthy control: in-memory tensors, a small MLP, SGD.

advise-expect: none
"""
import torch
from torch.utils.data import DataLoader, TensorDataset

from _common import train_forever

if __name__ == "__main__":
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(8192, 128), torch.randn(8192, 1))
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 1))
    loader = DataLoader(data, batch_size=64, shuffle=True)
    train_forever(model, loader, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9))
