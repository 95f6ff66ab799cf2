"""A loop whose DataLoader is built by a library's factory (vendor/site-packages: not the user's
code, so the probe cannot see inside it) and whose optimizer takes its settings through **kwargs:
`advise apply` refuses both, each in one line, and still writes what it can."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "vendor", "site-packages"))
from loaderlib import make_loader


if __name__ == "__main__":
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 1)
    loader = make_loader(4096, batch_size=16)
    settings = {"lr": 1e-3, "momentum": 0.9}
    opt = torch.optim.SGD(model.parameters(), **settings)
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step + 1 >= int(os.environ.get("STEPS", "200")):
            break
    print("precision", torch.get_float32_matmul_precision())
