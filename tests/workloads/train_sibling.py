"""Imports a helper module beside it and reads its own flags, __file__ and cwd."""
import argparse
import os
import sys

import torch

from mymodel import build_model  # the sibling module: needs sys.path[0] == this folder

parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, required=True)
parser.add_argument("--steps", type=int, default=200)
args = parser.parse_args()
print(f"ARGV={sys.argv!r}", file=sys.stderr)
print(f"NAME={__name__} FILE={os.path.basename(__file__)} CWD={os.getcwd()}", file=sys.stderr)
print(f"PATH0={sys.path[0]}", file=sys.stderr)

model = build_model(args.width)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for _ in range(args.steps):
    x = torch.randn(16, args.width)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
