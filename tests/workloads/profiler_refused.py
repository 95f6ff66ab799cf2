"""A machine whose profiler refuses to start (a container without CUPTI, a locked-down cluster):
torch.profiler's start() raises. advise must go on without a trace, say so, and keep the step times."""
import torch


def refuse(self):
    raise RuntimeError("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: profiling is not permitted on this machine")


torch.profiler.profile.start = refuse

model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64)
for step in range(40):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
