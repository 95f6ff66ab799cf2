"""An Accelerate loop on the CPU whose precision is the script's own flag, as issue 52 found it:
`Accelerator(mixed_precision=args.mixed_precision)` with `--mixed-precision` defaulting to "no". The
script prints the precision it ran with."""
import argparse

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--mixed-precision", default="no", choices=["no", "fp16", "bf16"])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    accelerator = Accelerator(mixed_precision=args.mixed_precision, cpu=True)
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
        if step + 1 >= args.steps:
            break
    print("precision", accelerator.mixed_precision)
