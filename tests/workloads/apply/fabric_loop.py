"""A Lightning Fabric loop on the CPU: `L.Fabric(...)` is where its precision is set; the script
prints the precision it ran with."""
import os

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    fabric = L.Fabric(accelerator="cpu", devices=1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    model, opt = fabric.setup(model, opt)
    loader = fabric.setup_dataloaders(DataLoader(TensorDataset(torch.randn(4096, 64), torch.randn(4096, 1)), batch_size=32))
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
        opt.zero_grad()
        fabric.backward(loss)
        opt.step()
        if step + 1 >= int(os.environ.get("STEPS", "200")):
            break
    print("precision", fabric.strategy.precision.precision)
