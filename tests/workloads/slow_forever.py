"""Trains forever with ~20 ms steps (an RL-style `while True` loop): stopped by the window or Ctrl-C."""
import time

import torch

model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
while True:
    loss = model(torch.randn(8, 16)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.02)
