"""nanoGPT's own autocast, as its train.py has it: the forward runs under `with ctx:`, where `ctx` is a
no-op context on a CPU and `torch.amp.autocast(dtype=ptdtype)` elsewhere, `ptdtype` chosen by the
global `dtype` that configurator.py sets from `--dtype=...`. Prints the forward's dtype at the end."""
from contextlib import nullcontext

import torch

# -----------------------------------------------------------------------------
device = "cpu"
dtype = "float32"  # 'float32', 'bfloat16' or 'float16'
steps = 200
exec(open("configurator.py").read())  # overrides from the command line
# -----------------------------------------------------------------------------

device_type = "cuda" if "cuda" in device else "cpu"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type, dtype=ptdtype)

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
out = None
for step in range(steps):
    x = torch.randn(32, 64)
    with ctx:
        out = model(x)
        loss = out.float().pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
print("forward", str(out.dtype).removeprefix("torch."))
