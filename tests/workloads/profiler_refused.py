"""A machine whose profiler refuses to start (a container without CUPTI, a locked-down cluster):
torch.profiler's start() raises. advise must go on without a trace, say so, and keep the step times.

--device-only: only device tracing is refused (CUPTI missing, the host's tracing works); --cuda
trains on the GPU; --says-cuda is the CPU's stand-in for it: torch.cuda says a device is in use, so
the probe asks the profiler for the device's activity too (and is refused), while training runs on the CPU."""
import sys

import torch
from torch.profiler import ProfilerActivity

DEVICE_ONLY, DEVICE = "--device-only" in sys.argv, "cuda" if "--cuda" in sys.argv else "cpu"
start = torch.profiler.profile.start


def refuse(self):
    if DEVICE_ONLY and ProfilerActivity.CUDA not in self.activities:
        return start(self)
    raise RuntimeError("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: profiling is not permitted on this machine")


torch.profiler.profile.start = refuse
if "--says-cuda" in sys.argv:
    torch.cuda.is_available = torch.cuda.is_initialized = lambda: True

model = torch.nn.Linear(64, 64).to(DEVICE)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64, device=DEVICE)
for step in range(40):
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
