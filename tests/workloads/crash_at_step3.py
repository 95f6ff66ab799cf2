"""Raises inside the training loop at step 3."""
import torch

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def check(step):
    if step == 3:
        raise ValueError("planted failure at step 3")


for step in range(100):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    check(step)
