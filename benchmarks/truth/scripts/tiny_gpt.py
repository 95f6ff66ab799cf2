"""An overhead-bound small model: a 2-layer GPT (width 64, context 32, batch 8) on random tokens
with the default AdamW (foreach), so each step is many small ops and Python: the fused step and
torch.compile win, precision does not. Prints one timing line per step (issue 65's third shape)."""
import argparse
import time

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=100000)
args = parser.parse_args()

VOCAB, WIDTH, CONTEXT, HEADS, LAYERS, BATCH = 256, 64, 32, 4, 2, 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.attn = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))
        self.register_buffer("mask", torch.triu(torch.ones(CONTEXT, CONTEXT, dtype=torch.bool), 1))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=self.mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, WIDTH), nn.Embedding(CONTEXT, WIDTH)
        self.blocks = nn.Sequential(*[Block() for _ in range(LAYERS)])
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        return self.head(self.blocks(x))


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    t0 = time.perf_counter()
    for it in range(args.iters):
        idx = torch.randint(0, VOCAB, (BATCH, CONTEXT + 1))
        logits = model(idx[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), idx[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        print(f"iter {it}: loss {loss.item():.4f}, time {(t1 - t0) * 1e3:.2f}ms", flush=True)
        t0 = t1
