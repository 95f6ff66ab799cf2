"""A deep residual stack in an nn.ModuleList whose activations dominate its peak memory.

Each block (LayerNorm, a narrow Linear, GELU, a gate) keeps several batch-sized tensors alive
for backward; 32 blocks over a wide batch make activations most of the peak, which is what
activation checkpointing trades for recomputation.

`--oom-above N` plays an accelerator with room for N rows: a larger batch raises the
`torch.OutOfMemoryError` a GPU would, from inside the forward pass (a CPU has no such limit).
"""
import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.proj = torch.nn.Linear(width, width)
        self.gate = torch.nn.Parameter(torch.zeros(width))

    def forward(self, x):
        h = torch.nn.functional.gelu(self.proj(self.norm(x)))
        return x + h * torch.sigmoid(self.gate) * torch.tanh(h)


class DeepResidual(torch.nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(width) for _ in range(depth))
        self.head = torch.nn.Linear(width, 1)

    oom_above = 0

    def forward(self, x):
        if self.oom_above and x.shape[0] > self.oom_above:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate a batch of {x.shape[0]} rows (planted)")
        for block in self.blocks:
            x = block(x)
        return self.head(x)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--depth", type=int, default=32)
    parser.add_argument("--oom-above", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(16 * args.batch, args.width), torch.randn(16 * args.batch, 1))
    loader = DataLoader(data, batch_size=args.batch, shuffle=True)
    model = DeepResidual(args.width, args.depth)
    model.oom_above = args.oom_above
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for _ in range(1000):
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
