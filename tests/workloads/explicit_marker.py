"""A loop the probe cannot see (no optimizer, no DataLoader, no backward): it calls advisor.step()."""
import torch

import advisor

w = torch.randn(64, 64)
for _ in range(10_000):
    x = torch.randn(24, 64)
    for _ in range(5):
        x = torch.tanh(x @ w)
    advisor.step(samples=24)
