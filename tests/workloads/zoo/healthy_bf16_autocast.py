"""Healthy control: the big MLP of fp32_big_mlp.py, already under bf16 autocast (batches of 16:
a CPU without native bf16 runs its backward at 1 s a step where 64 took 3.3 s).

advise-expect: none
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(2048, 2048), torch.randn(2048, 2048))
    model = nn.Sequential(nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 2048))
    loader = DataLoader(data, batch_size=16, shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(1000):
        for x, y in loader:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = model(x)
            loss = nn.functional.mse_loss(out.float(), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
