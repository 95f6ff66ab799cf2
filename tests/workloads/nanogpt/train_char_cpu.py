# Trimmed from karpathy/nanoGPT (https://github.com/karpathy/nanoGPT), train.py at commit
# 3adf61e154c3fe3fca428ad6bc3818b27a3b8291, with the README's CPU ("I only have a macbook")
# settings of config/train_shakespeare_char.py as defaults:
#   --device=cpu --compile=False --eval_iters=20 --log_interval=1 --block_size=64
#   --batch_size=12 --n_layer=4 --n_head=4 --n_embd=128 --dropout=0.0
# Kept: the configurator (--key=value), the char-level data, configure_optimizers (AdamW,
# fused only on CUDA), the cosine LR schedule, grad clipping, the first evaluation at
# iteration 0, zero_grad(set_to_none=True). Dropped: DDP, checkpoints, wandb, GradScaler,
# resume/gpt2 init. The corpus is this folder's own source text, char-level, in memory
# (shakespeare_char's prepare.py downloads its input, which a test cannot).
#
# MIT License, Copyright (c) 2022 Andrej Karpathy: see the full text in model.py beside this file.
import math
import os
import sys
import time

import torch

from model import GPT, GPTConfig

eval_interval = 250
log_interval = 50
eval_iters = 20
batch_size = 12
block_size = 64
n_layer = 4
n_head = 4
n_embd = 128
dropout = 0.0
bias = False
learning_rate = 1e-3
max_iters = 2000
weight_decay = 1e-1
beta1 = 0.9
beta2 = 0.99
grad_clip = 1.0
decay_lr = True
warmup_iters = 100
lr_decay_iters = 2000
min_lr = 1e-4
device = 'cpu'
compile = False
# the poor man's configurator (nanoGPT's configurator.py), --key=value only
for arg in sys.argv[1:]:
    key, val = arg.removeprefix('--').split('=')
    assert key in globals(), f"Unknown config key: {key}"
    globals()[key] = type(globals()[key])(val) if not isinstance(globals()[key], bool) else val == 'True'

torch.manual_seed(1337)
here = os.path.dirname(os.path.abspath(__file__))
text = "".join(open(os.path.join(here, f)).read() for f in sorted(os.listdir(here)) if f.endswith('.py'))
chars = sorted(set(text))
stoi = {ch: i for i, ch in enumerate(chars)}
data = torch.tensor([stoi[c] for c in text], dtype=torch.long)
n = int(0.9 * len(data))
train_data, val_data = data[:n], data[n:]


def get_batch(split):
    data = train_data if split == 'train' else val_data
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
    return x.to(device), y.to(device)


model = GPT(GPTConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size, bias=bias,
                      vocab_size=len(chars), dropout=dropout))
model.to(device)
optimizer = model.configure_optimizers(weight_decay, learning_rate, (beta1, beta2), 'cpu')
if compile:
    model = torch.compile(model)


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ['train', 'val']:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            logits, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


X, Y = get_batch('train')
t0 = time.time()
iter_num = 0
while True:
    lr = get_lr(iter_num) if decay_lr else learning_rate
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr
    if iter_num % eval_interval == 0:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
    logits, loss = model(X, Y)
    X, Y = get_batch('train')
    loss.backward()
    if grad_clip != 0.0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    t1 = time.time()
    dt, t0 = t1 - t0, t1
    if iter_num % log_interval == 0:
        print(f"iter {iter_num}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms")
    iter_num += 1
    if iter_num > max_iters:
        break
