"""A loop that evaluates and saves inside its steps, as real training scripts do.

--mode loader: every --every steps, a pass over its own validation DataLoader under no_grad
    (8 batches of 64, each 10 ms of work: an evaluation 8x a training step);
--mode module: every --every steps, nanoGPT's estimate_loss shape: model.eval(), 5 forwards on
    held-out tensors, model.train(), no DataLoader;
--mode ema: every step, an EMA copy's forward between ema.eval() and ema.train(): the step's own
    work, not a phase;
--save-every N: every N steps a checkpoint (torch.save of the model and an 8 MB buffer);
--eval-workers N: the validation loader's workers (forked and joined at each evaluation), the pass
    between model.eval() and model.train(), as pytorch/vision's evaluate();
--save-with dcp|safetensors: the checkpoint through torch.distributed.checkpoint.save or
    safetensors.torch.save_file instead of torch.save (imported when the loop first saves);
--save-twice: each checkpoint written twice (pytorch/vision's train.py: model_{epoch}.pth and checkpoint.pth).
--epoch-steps N --workers W: epochs of N steps from a loader of W workers without persistent_workers, so
    each epoch forks its workers anew (pytorch/vision's train.py with its default -j 16);
--persistent: the training loader keeps its workers between epochs (persistent_workers=True).
Training: batches of 16 from a 0-worker DataLoader, an MLP, SGD, ~10 ms a step."""
import argparse
import copy
import itertools
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--mode", choices=["loader", "module", "ema"], default="loader")
p.add_argument("--every", type=int, default=5)
p.add_argument("--save-every", type=int, default=0)
p.add_argument("--save-twice", action="store_true")
p.add_argument("--eval-workers", type=int, default=0)
p.add_argument("--save-with", choices=["torch", "dcp", "safetensors"], default="torch")
p.add_argument("--epoch-steps", type=int, default=256)
p.add_argument("--workers", type=int, default=0)
p.add_argument("--steps", type=int, default=100000)
p.add_argument("--persistent", action="store_true")
args = p.parse_args()

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
ema = copy.deepcopy(model)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
train = DataLoader(TensorDataset(torch.randn(16 * args.epoch_steps, 32), torch.randn(16 * args.epoch_steps, 1)), batch_size=16,
                   shuffle=True, num_workers=args.workers, persistent_workers=args.persistent)
val = DataLoader(TensorDataset(torch.randn(512, 32), torch.randn(512, 1)), batch_size=64, num_workers=args.eval_workers)
held_out = torch.randn(64, 32)
big = torch.zeros(2_000_000)


def evaluate_loader():
    if args.eval_workers:
        model.eval()
    with torch.no_grad():
        for x, y in val:
            torch.nn.functional.mse_loss(model(x), y)
            time.sleep(0.01)
    model.train()


def evaluate_module():
    model.eval()
    with torch.no_grad():
        for _ in range(5):
            model(held_out)
            time.sleep(0.01)
    model.train()


def epochs():
    while True:
        yield from train  # a new iterator each epoch: its workers forked anew


for step, (x, y) in enumerate(itertools.islice(epochs(), args.steps)):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.01)
    if args.mode == "ema":
        ema.eval()
        with torch.no_grad():
            ema(x)
        ema.train()
    elif step % args.every == args.every - 1:
        evaluate_loader() if args.mode == "loader" else evaluate_module()
    if args.save_every and step % args.save_every == args.save_every - 1:
        if args.save_with == "dcp":
            import torch.distributed.checkpoint as dcp
            dcp.save({"model": model.state_dict(), "buffer": big}, checkpoint_id=f"dcp-{step}")
        elif args.save_with == "safetensors":
            from safetensors.torch import save_file
            save_file({**model.state_dict(), "buffer": big}, "checkpoint.safetensors")
        else:
            torch.save({"model": model.state_dict(), "buffer": big}, "checkpoint.pt")
        if args.save_twice:
            torch.save({"model": model.state_dict(), "buffer": big}, f"model_{step}.pt")
