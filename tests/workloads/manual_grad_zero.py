"""A hand-written gradient reset: every step zeroes each parameter's .grad in place (no zero_grad)."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(1024, 1024), nn.ReLU())], nn.Linear(1024, 1))
for p in model.parameters():
    p.grad = torch.zeros_like(p)
for step in range(1000):
    x, y = torch.randn(4, 1024), torch.randn(4, 1)
    for p in model.parameters():
        p.grad.zero_()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
