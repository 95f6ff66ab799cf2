"""Planted (GPU): FP32 matmuls, a `.item()` host sync every step, a single-tensor AdamW.

advise-expect: PR001 GPU003 OPT001
"""
import torch
import torch.nn as nn

if __name__ == "__main__":
    torch.manual_seed(0)
    dev = "cuda"
    model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(4096, 4096), nn.GELU())]).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    x = torch.randn(512, 4096, device=dev)
    y = torch.randn(512, 4096, device=dev)
    losses = []
    for step in range(100000):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # planted host sync
