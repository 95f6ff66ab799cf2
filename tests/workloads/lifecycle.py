"""A script with loose ends, for the lifecycle tests (tests/test_faults_lifecycle.py).

- starts a helper in a session of its own (``start_new_session=True``), as launchers of
  TensorBoard, data servers or watchdogs do: a ``killpg`` of the script's group misses it.
  Its command line names ``--marker``, so a test can find it among the host's processes;
- registers an ``atexit`` handler that appends ``atexit <pid>`` to ``MARKER/atexit.txt``;
- trains with steps of about ``--step-ms`` (a sleep: a signal lands mid-run on any machine),
  ``--data-ms`` of it spent inside the DataLoader (no workers), which makes DL001 fire
  and the experiments run;
- prints ``HELPER=<pid>`` on stderr (script.log);
- with ``--crash-at N``, raises ValueError at step N;
- with ``--stubborn-helper``, the helper ignores SIGTERM, as a server that only stops on SIGKILL;
- with ``--ignore-interrupts``, catches Ctrl-C's KeyboardInterrupt and trains on, as a script
  stuck in a blocking call would.
"""
import argparse
import atexit
import os
import subprocess
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--marker", required=True, help="a folder: atexit.txt goes there; the helper's command line names it")
parser.add_argument("--step-ms", type=float, default=30.0)
parser.add_argument("--data-ms", type=float, default=0.0)
parser.add_argument("--ignore-interrupts", action="store_true", help="catch KeyboardInterrupt and train on")
parser.add_argument("--crash-at", type=int, default=None, help="raise ValueError at this step")
parser.add_argument("--stubborn-helper", action="store_true", help="the helper ignores SIGTERM (only SIGKILL ends it)")
args = parser.parse_args()

os.makedirs(args.marker, exist_ok=True)
ignore = "import signal; signal.signal(signal.SIGTERM, signal.SIG_IGN); " if args.stubborn_helper else ""
helper = subprocess.Popen([sys.executable, "-c", ignore + "import sys, time; time.sleep(600)", args.marker],
                          start_new_session=True, stdin=subprocess.DEVNULL)
print(f"HELPER={helper.pid}", file=sys.stderr, flush=True)


@atexit.register
def _leave_a_mark():
    with open(os.path.join(args.marker, "atexit.txt"), "a") as f:
        f.write(f"atexit {os.getpid()}\n")


class Slow(Dataset):
    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        time.sleep(args.data_ms / 1e3 / 8)  # 8 samples per batch
        return torch.randn(16), torch.randn(1)


loader = DataLoader(Slow(), batch_size=8)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
rest_s = max(0.0, (args.step_ms - args.data_ms) / 1e3)


def train():
    for step, (x, y) in enumerate(loader):
        if step == args.crash_at:
            raise ValueError(f"planted failure at step {step}")
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        time.sleep(rest_s)
        opt.step()


while True:
    try:
        train()
        break
    except KeyboardInterrupt:
        if not args.ignore_interrupts:
            raise
        print("ignored a stop", file=sys.stderr, flush=True)
