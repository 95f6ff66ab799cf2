"""nanoGPT's way of configuring a script: module-level globals, overridden from the command line by
`exec(open("configurator.py").read())` (`python train.py --mixed_precision=bf16`); the precision is
one of them, given to Accelerate. The script prints the precision it ran with."""
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

# -----------------------------------------------------------------------------
mixed_precision = "no"  # 'no', 'fp16' or 'bf16'
steps = 200
exec(open("configurator.py").read())  # overrides from the command line
# -----------------------------------------------------------------------------

accelerator = Accelerator(mixed_precision=mixed_precision, cpu=True)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
loader = DataLoader(TensorDataset(torch.randn(4096, 256), torch.randn(4096, 1)), batch_size=64)
model, opt, loader = accelerator.prepare(model, opt, loader)
for step, (x, y) in enumerate(loader):
    loss = torch.nn.functional.mse_loss(model(x).float(), y)
    opt.zero_grad()
    accelerator.backward(loss)
    opt.step()
    if step + 1 >= steps:
        break
print("precision", accelerator.mixed_precision)
