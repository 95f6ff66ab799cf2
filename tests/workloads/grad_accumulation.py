"""Gradient accumulation over 12 micro-batches per optimizer step: one step is one optimizer step."""
import torch
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.randn(100_000, 16), torch.randn(100_000, 1))
loader = DataLoader(data, batch_size=4)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i, (x, y) in enumerate(loader):
    loss = torch.nn.functional.mse_loss(model(x), y) / 12
    loss.backward()
    if (i + 1) % 12 == 0:
        opt.step()
        opt.zero_grad()
