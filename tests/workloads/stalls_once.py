"""Steady ~5 ms steps, but step 12 stalls 600 ms (a machine that was busy, a checkpoint write)."""
import time

import torch

model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64)
for step in range(200):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    time.sleep(0.6 if step == 12 else 0.005)
    opt.step()
