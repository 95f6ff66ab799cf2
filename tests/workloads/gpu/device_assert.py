"""A script whose 13th step indexes out of bounds on the GPU: a device-side assert poisons the CUDA
context, and every later CUDA call fails. The error reported must be the script's own."""
import torch

model = torch.nn.Linear(256, 256).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 256, device="cuda")
for step in range(200):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step == 12:
        bad = torch.tensor([10_000], device="cuda")
        print(x[bad].sum().item())
