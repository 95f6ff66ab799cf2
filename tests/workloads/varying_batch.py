"""A loop whose batch size changes every few steps, as a bucketed or ragged loader's does: a compiled
model recompiles when its input's shape changes. Tiny, so that compiling it is quick."""
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=400)
parser.add_argument("--sizes", default="8,5,7", help="the batch sizes, in turn")
parser.add_argument("--every", type=int, default=2, help="steps between two changes of the batch size")
args = parser.parse_args()
sizes = [int(s) for s in args.sizes.split(",")]


class Net(torch.nn.Module):
    """A forward of the script's own: dynamo compiles this frame."""

    def __init__(self):
        super().__init__()
        self.hidden, self.out = torch.nn.Linear(16, 32), torch.nn.Linear(32, 1)

    def forward(self, x):
        return self.out(torch.relu(self.hidden(x)))


torch.manual_seed(0)
model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(args.steps):
    batch = sizes[(step // args.every) % len(sizes)]
    x, y = torch.randn(batch, 16), torch.randn(batch, 1)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
