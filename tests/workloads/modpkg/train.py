"""Writes how it was started (what `python -m` sets), then trains a tiny model for --steps steps."""
import argparse
import json
import os
import sys

import torch

from .helpers import make_model

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)  # the same word as an advise option: the script's here
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--record", required=True)
    args = parser.parse_args()
    with open(args.record, "w") as f:
        json.dump({"name": __name__, "spec": __spec__.name, "package": __package__, "argv0": sys.argv[0],
                   "argv": sys.argv[1:], "path0": sys.path[0], "cwd": os.getcwd(), "width": args.width}, f)
    print(f"training for {args.steps} steps")
    model = make_model(args.width)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        loss = model(torch.randn(32, 16)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("done")
    sys.exit(3 if args.steps == 7 else 0)
