"""A script configured by a YAML file, as many are: the loader's workers are `data.workers` in
config.yaml. Prints the workers it ran with."""
import torch
import yaml
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):
        x = torch.full((64,), float(i % 7))
        return x, x.pow(2).sum(0, keepdim=True)


def main():
    with open("config.yaml") as f:
        cfg = yaml.safe_load(f)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    loader = DataLoader(Squares(), batch_size=cfg["data"]["batch_size"], shuffle=True,
                        num_workers=cfg["data"]["workers"])
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step + 1 >= cfg["steps"]:
            break
    print("workers", loader.num_workers)


if __name__ == "__main__":
    main()
