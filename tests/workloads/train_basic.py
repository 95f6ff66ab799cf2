"""A normal small training loop: Linear model, DataLoader, SGD, its own argparse flags."""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--workers", type=int, default=0)
args = parser.parse_args()

torch.manual_seed(0)
data = TensorDataset(torch.randn(4096, 64), torch.randn(4096, 1))
loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
opt = torch.optim.SGD(model.parameters(), lr=args.lr)

for epoch in range(args.epochs):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
