"""Planted call sites for source locations: a host sync (`.item()`), an FP32 matmul, a copy off
the CPU, a Dataset whose __getitem__ is the loader's work. Tests find their lines by the
`# site:` markers, never by number."""
import torch
from torch.utils.data import DataLoader, Dataset


class Squares(Dataset):
    def __len__(self):
        return 4096

    def __getitem__(self, i):  # site: getitem
        x = torch.full((32,), float(i % 7))
        return x, x.sum(dim=0, keepdim=True)


def train_step(model, proj, opt, x, y):
    h = x @ proj  # site: matmul
    loss = torch.nn.functional.mse_loss(model(h), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()  # site: item


if __name__ == "__main__":
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 1)
    proj = torch.randn(32, 32)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for epoch in range(1000):
        for x, y in DataLoader(Squares(), batch_size=16):
            x.to("meta")  # site: copy
            train_step(model, proj, opt, x, y)
