"""Steady ~25 ms steps, but step 12 stalls 1 s (a machine that was busy, a checkpoint write).

The steady steps are long enough that a busy CI neighbour (a 10-20 ms scheduling delay) does not
cross the stall fence (twice the median) and read as a second stall."""
import time

import torch

model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64)
for step in range(200):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    time.sleep(1.0 if step == 12 else 0.025)
    opt.step()
