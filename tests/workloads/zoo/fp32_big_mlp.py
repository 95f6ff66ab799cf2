"""Planted: large FP32 matmuls dominate the step on a CPU with native bf16 (AVX512-BF16/AMX).

advise-expect: PR001 exclusive needs=cpu_bf16
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

from _common import train_forever

if __name__ == "__main__":
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(2048, 2048), torch.randn(2048, 2048))
    model = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048))
    loader = DataLoader(data, batch_size=64, shuffle=True)
    train_forever(model, loader, torch.optim.SGD(model.parameters(), lr=0.01))
