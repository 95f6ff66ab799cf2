"""No DataLoader: 24 samples a step, sliced by hand, into a model behind a wrapper (--wrap).

none | compile (the script compiles its own model) | ddp (one gloo rank) | autocast (a module
that calls the model under bf16 autocast) | lstm (a sequence-first LSTM: inputs are
(35, 24, features), the batch is the second dimension, as in word_language_model) | fabric
(Lightning Fabric's wrapped module and optimizer, bf16-mixed precision) | lightning (a
LightningModule fitted by a Trainer on a plain list of batches, no DataLoader).
"""
import argparse
import os

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--wrap", default="none")
parser.add_argument("--steps", type=int, default=400)
wrap = parser.parse_args().wrap
torch.manual_seed(0)
BATCH = 24


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 32)

    def forward(self, x):
        return torch.relu(self.lin(x))


class Net(nn.Module):  # Block reused: a class-level patch of the model's class must not see it
    def __init__(self):
        super().__init__()
        self.blocks = nn.Sequential(Block(), Block())
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        return self.head(self.blocks(x))


class Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(32, 32)
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out)


class Autocast(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.inner(x).float()


if wrap == "lightning":
    import lightning as L

    class Lit(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = Net()

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, _):
            x, y = batch
            return nn.functional.mse_loss(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Batches:  # an iterable of batches, no torch DataLoader (a list would read as several loaders)
        def __init__(self, n):
            self.data = [(torch.randn(BATCH, 32), torch.randn(BATCH, 1)) for _ in range(8)] * (n // 8 + 1)

        def __iter__(self):
            return iter(self.data)

        def __len__(self):
            return len(self.data)

    steps = parser.parse_args().steps
    batches = Batches(steps)
    L.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
              enable_progress_bar=False, enable_model_summary=False).fit(Lit(), batches)
    raise SystemExit(0)

model = Seq() if wrap == "lstm" else Net()
params = list(model.parameters())
if wrap == "compile":
    model = torch.compile(model)
elif wrap == "autocast":
    model = Autocast(model)
elif wrap == "ddp":
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    model = nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(params, lr=0.01)
backward = lambda loss: loss.backward()  # noqa: E731
if wrap == "fabric":
    import lightning as L

    fabric = L.Fabric(accelerator="cpu", devices=1, precision="bf16-mixed")
    model, opt = fabric.setup(model, opt)
    backward = fabric.backward
shape = (35, BATCH, 32) if wrap == "lstm" else (BATCH, 32)
X = torch.randn(*shape)
Y = torch.randn(*shape[:-1], 1)
for step in range(parser.parse_args().steps):
    loss = nn.functional.mse_loss(model(X), Y)
    opt.zero_grad()
    backward(loss)
    opt.step()
