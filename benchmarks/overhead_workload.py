"""Benchmark workload: times its own steps (same clock plain or probed) and prints the median.

    python overhead_workload.py --iters 300 --width 512
"""
import argparse
import statistics
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int, default=300)
parser.add_argument("--width", type=int, default=512)
parser.add_argument("--skip", type=int, default=20)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)  # one core for the model, the other for the sampler and the OS
data = TensorDataset(torch.randn(64 * args.iters, args.width), torch.randn(64 * args.iters, 1))
loader = DataLoader(data, batch_size=64)
model = torch.nn.Sequential(torch.nn.Linear(args.width, args.width), torch.nn.ReLU(), torch.nn.Linear(args.width, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
times = []
t = time.perf_counter()
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    now = time.perf_counter()
    times.append(now - t)
    t = now
print(f"STEP_MEDIAN_S={statistics.median(times[args.skip:]):.9f}")
