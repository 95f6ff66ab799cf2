"""Healthy control (GPU): bf16 autocast, fused AdamW, data already on the GPU, no host syncs.

advise-expect: none
"""
import torch
import torch.nn as nn

if __name__ == "__main__":
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(4096, 4096), nn.GELU())]).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(512, 4096, device="cuda")
    y = torch.randn(512, 4096, device="cuda")
    for step in range(100000):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
        loss = nn.functional.mse_loss(out.float(), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
