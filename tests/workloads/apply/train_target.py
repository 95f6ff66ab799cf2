"""A training loop for `advise apply`: each line a fix changes is a line of its own (the DataLoader
over several lines, with comments; the optimizer; the model; the forward and the loss; the batch
copied off the CPU, to the meta device every machine has), and the script prints its own settings
at the end, so a test sees whether a patch took effect."""
import argparse

import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        x = torch.full((32,), float(i % 7))
        return x, x.sum(dim=0, keepdim=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    loader = DataLoader(
        Squares(),
        batch_size=16,  # small batches: a short loop
        shuffle=True,
    )
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    dtype = None
    for step, (x, y) in enumerate(loader):
        x.to("meta")  # the batch's copy off the CPU
        out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        dtype = out.dtype
        if step + 1 >= args.steps:
            break
    # what the script ran with, for the tests to read
    print(f"loader num_workers={loader.num_workers} persistent_workers={loader.persistent_workers} "
          f"pin_memory={loader.pin_memory}")
    print("precision", torch.get_float32_matmul_precision())
    print("fused", opt.defaults.get("fused"))
    print("compiled", type(model).__name__ == "OptimizedModule")
    print("forward", str(dtype).removeprefix("torch."))


if __name__ == "__main__":
    main()
