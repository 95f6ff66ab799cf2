"""A click command line, as many training scripts have one: the loader's workers are its `-j/--workers`
option. Prints the workers it ran with."""
import click
import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        x = torch.full((64,), float(i % 7))
        return x, x.pow(2).sum(0, keepdim=True)


@click.command()
@click.option("-j", "--workers", default=0, type=int, help="DataLoader worker processes")
@click.option("--steps", default=200, type=int)
def main(workers, steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    loader = DataLoader(Squares(), batch_size=32, shuffle=True, num_workers=workers)
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
