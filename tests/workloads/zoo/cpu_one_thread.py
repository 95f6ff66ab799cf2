"""Planted: a compute-bound model on one intra-op thread, the other cores idle (no workers).

advise-expect: CPU003 exclusive
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from _common import train_forever

if __name__ == "__main__":
    torch.set_num_threads(1)  # a leftover from debugging, or copied from a DataLoader worker's setup
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(8192, 512), torch.randn(8192, 1))  # layers under PR001's 100 MFLOP floor
    model = nn.Sequential(nn.Linear(512, 768), nn.ReLU(), nn.Linear(768, 768), nn.ReLU(), nn.Linear(768, 1))
    loader = DataLoader(data, batch_size=64, shuffle=True)
    train_forever(model, loader, torch.optim.SGD(model.parameters(), lr=0.01, foreach=True))
