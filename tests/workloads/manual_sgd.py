"""Manual SGD under torch.no_grad(), no torch.optim, no DataLoader."""
import torch

torch.manual_seed(0)
w = torch.randn(32, 1, requires_grad=True)
for step in range(200):
    x = torch.randn(64, 32)
    loss = (x @ w).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        w -= 0.01 * w.grad
        w.grad = None
