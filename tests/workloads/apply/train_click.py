"""A click command line, as many training scripts have one: the loader's workers are its `-j/--workers`
option; `--item-ms` makes each sample wait that long (a disk). Prints the workers it ran with."""
import time

import click
import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __init__(self, item_ms):
        self.item_ms = item_ms

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        if self.item_ms:
            time.sleep(self.item_ms / 1e3)
        x = torch.full((64,), float(i % 7))
        return x, x.pow(2).sum(0, keepdim=True)


@click.command()
@click.option("-j", "--workers", default=0, type=int, help="DataLoader worker processes")
@click.option("--steps", default=200, type=int)
@click.option("--item-ms", default=0.0, type=float)
def main(workers, steps, item_ms):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    loader = DataLoader(Squares(item_ms), batch_size=16, shuffle=True, num_workers=workers)
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step + 1 >= steps:
            break
    print("workers", loader.num_workers)


if __name__ == "__main__":
    main()
