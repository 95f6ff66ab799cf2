"""What source locations cost a step, measured in process on the overhead workload's model.

Two figures, each from alternating blocks of steps (A B A B ..., the median step of each block,
the median of the per-pair ratios, so machine drift cancels):

1. The probe's capture step: a step with :class:`advisor.probe.sources.SourceCapture` active
   (a TorchFunctionMode recording the user's lines) against a plain step. The probe runs one
   such step, the last warm-up step, which is never measured: this is the price of that step.
2. Python stacks in the profiler: a profiled step with ``with_stack=True`` (what the probe's
   window records, and what a trace needs for `advise analyze` to find locations) against
   ``with_stack=False``, both with the probe's other settings (record_shapes, with_flops,
   profile_memory).

    python benchmarks/source_overhead.py [--pairs 5] [--steps 30] [--width 64 --width 512]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from advisor.probe.sources import SourceCapture


def make_step(width: int):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, width), torch.randn(64, 1)

    def step() -> float:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return step


def block_plain(step, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def block_captured(step, n: int) -> float:
    times = []
    for _ in range(n):
        capture = SourceCapture()
        t = time.perf_counter()
        capture.start()
        step()
        capture.stop()
        times.append(time.perf_counter() - t)
    assert capture.sites["host-sync"], "the capture saw no .item()"
    return statistics.median(times)


def block_profiled(step, n: int, with_stack: bool) -> float:
    times = []
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True, profile_memory=True,
                 with_stack=with_stack):
        for _ in range(n):
            t = time.perf_counter()
            step()
            times.append(time.perf_counter() - t)
    return statistics.median(times[1:])


def pairs(a, b, n: int) -> tuple[float, float, float]:
    """(median of a, median of b, median of the b/a ratios) over `n` alternating pairs."""
    xs, ys, ratios = [], [], []
    for i in range(n):
        if i % 2:
            y, x = b(), a()
        else:
            x, y = a(), b()
        xs.append(x), ys.append(y), ratios.append(y / x)
    return statistics.median(xs), statistics.median(ys), statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--width", type=int, action="append")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for width in args.width or [64, 512]:
        step = make_step(width)
        for _ in range(10):
            step()
        plain, captured, ratio = pairs(lambda step=step: block_plain(step, args.steps), lambda step=step: block_captured(step, args.steps),
                                       args.pairs)
        print(f"width {width}: capture step {captured * 1e3:.3f} ms vs plain {plain * 1e3:.3f} ms: {ratio:.2f}x "
              f"(+{(captured - plain) * 1e6:.0f} us, once per run)")
        off, on, ratio = pairs(lambda step=step: block_profiled(step, args.steps, False),
                               lambda step=step: block_profiled(step, args.steps, True), args.pairs)
        print(f"width {width}: profiled step with_stack {on * 1e3:.3f} ms vs without {off * 1e3:.3f} ms: {ratio:.2f}x")


if __name__ == "__main__":
    main()
