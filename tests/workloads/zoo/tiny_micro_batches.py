"""Planted: gradient accumulation over 4 micro-batches of 2 samples each.

advise-expect: STEP001 exclusive
"""
import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(8192, 64), torch.randn(8192, 1))
    loader = DataLoader(data, batch_size=2, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    accum = 4
    for epoch in range(1000):
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model(x), y) / accum
            loss.backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad(set_to_none=True)
