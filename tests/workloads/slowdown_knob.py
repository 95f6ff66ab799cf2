"""A training loop with a slowdown knob, for the regression gate (`advise compare`).

Each step does a little real work (a small MLP, forward/backward/SGD) and then waits so that
the step takes about `--step-ms` in all. `--slowdown F` makes every step F times as long:
the wait is calibrated against the step's own measured time, so F=1.1 is a 10% slower step
however fast the machine is. The wait is a sleep, not CPU work, on purpose: on a shared
2-core CI runner the gate's tests must see the planted slowdown, not a neighbour's load.

`--step-ms 0` turns the wait off: pure CPU work, the noisiest case (see
benchmarks/compare_false_alarms.py).
"""
import argparse
import os
import statistics
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--slowdown", type=float, default=1.0, help="multiply every step's time by this")
parser.add_argument("--step-ms", type=float, default=40.0, help="target step time at --slowdown 1 (0: no wait)")
parser.add_argument("--width", type=int, default=256)
parser.add_argument("--widen", type=float, default=1.0, help="multiply the hidden width: more work per step, not a wait")
parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
parser.add_argument("--batch-size", type=int, default=32)
parser.add_argument("--epochs", type=int, default=1000)
parser.add_argument("--barrier", default=None, help="a folder: wait there until --parties runs are ready, then start together")
parser.add_argument("--parties", type=int, default=2)
args = parser.parse_args()

if args.barrier:  # runs compared side by side start their steps together, so they share whatever load there is
    os.makedirs(args.barrier, exist_ok=True)
    open(os.path.join(args.barrier, str(os.getpid())), "w").close()
    deadline = time.monotonic() + 120
    while len(os.listdir(args.barrier)) < args.parties and time.monotonic() < deadline:
        time.sleep(0.01)

torch.manual_seed(0)
torch.set_num_threads(args.threads)  # one core by default: less sensitive to whatever else the runner is doing
data = TensorDataset(torch.randn(2048, 64), torch.randn(2048, 1))
loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True)
model = torch.nn.Sequential(torch.nn.Linear(64, round(args.width * args.widen)), torch.nn.ReLU(),
                            torch.nn.Linear(round(args.width * args.widen), 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
target_s = args.step_ms / 1e3

# A step (as the probe times it) = fetch + forward/backward + wait + optimizer step. The wait is
# set so the whole step takes slowdown * max(target, its own cost): forward/backward measured in
# this step, the rest (optimizer, fetch, hooks) from the median of the previous steps, so one
# slow fetch is not paid back by the next step.
rest: list[float] = []
after_wait = None
for epoch in range(args.epochs):
    for x, y in loader:
        t0 = time.perf_counter()
        if after_wait is not None:
            rest.append(t0 - after_wait)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        work = time.perf_counter() - t0
        other = statistics.median(rest[-15:]) if rest else 0.0
        wait = args.slowdown * max(target_s, work + other) - work - other
        if wait > 0:
            time.sleep(wait)
        after_wait = time.perf_counter()
        opt.step()
