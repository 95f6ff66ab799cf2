"""LBFGS: forward and backward run inside `optimizer.step(closure)`, as in Lightning's loop."""

import torch

torch.set_num_threads(1)  # a shared 2-core runner: no OpenMP barrier stalls inside the small optimizer ops
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.Tanh(), torch.nn.Linear(512, 1))
opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=5, history_size=5)
x, y = torch.randn(512, 256), torch.randn(512, 1)


def closure():
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


for step in range(40):
    opt.step(closure)
