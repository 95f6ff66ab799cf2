"""A script that never ends by itself, its DataLoader in 2 worker processes (a pin-memory thread
too, where CUDA is): only advise's time budget ends its experiments."""
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self):
        return 100000

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.randn(64), torch.randn(1)


if __name__ == "__main__":
    loader = DataLoader(Slow(), batch_size=16, num_workers=2, pin_memory=torch.cuda.is_available())
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    while True:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
