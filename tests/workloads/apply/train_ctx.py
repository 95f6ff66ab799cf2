"""nanoGPT's loop shape for `advise apply`: the forward and the loss's scaling inside a block of
their own (``with ctx:``, a nullcontext on a CPU), backward() after it, outside that block. Prints
the forward's dtype at the end, so a test sees whether a patch took effect."""
import argparse
from contextlib import nullcontext

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ctx = nullcontext()
    accumulate = 2
    dtype = None
    for step in range(args.steps):
        for micro_step in range(accumulate):
            x = torch.randn(16, 32)
            with ctx:
                out = model(x)
                loss = out.float().pow(2).mean() / accumulate  # scaled for the accumulation
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dtype = out.dtype
    print("forward", str(dtype).removeprefix("torch."))


if __name__ == "__main__":
    main()
