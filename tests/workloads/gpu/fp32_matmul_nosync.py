"""Planted (GPU): an FP32 matmul-bound loop that never syncs inside a step (its loss is read every
50 steps), so the host runs a step or more ahead of the device: a step timed on the host reads how
fast Python launches kernels. TF32 and bf16 are each worth 2x or more here (H100/H200).

advise-expect: PR001
"""
import torch
import torch.nn as nn

if __name__ == "__main__":
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    model = nn.Sequential(*[m for _ in range(6) for m in (nn.Linear(4096, 4096), nn.GELU())]).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    x = torch.randn(4096, 4096, device=dev)
    y = torch.randn(4096, 4096, device=dev)
    for step in range(100000):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
