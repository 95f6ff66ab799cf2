"""A revision whose hidden matmul size is a line of code, for `advise ab` (base and candidate checkouts).

Tests copy this file into two folders and change `HIDDEN` in one: the candidate's code really
differs, as a pull request's would, and the slower-ops table must name the matmuls that grew
(aten::addmm forward, aten::mm backward) with their new shapes. One thread, a small batch: a step
takes a few milliseconds at the base size.
"""
import argparse

import torch

HIDDEN = 128

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=10_000)
parser.add_argument("--batch-size", type=int, default=128)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
x, y = torch.randn(args.batch_size, 256), torch.randn(args.batch_size, 1)
model = torch.nn.Sequential(torch.nn.Linear(256, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(args.steps):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
