"""A Lightning job on the CPU: a small MLP under `L.Trainer(...).fit(...)`, matmul-bound, one
process. `--precision P`: the Trainer's precision ("32-true" as Lightning ships it, "bf16-mixed"
as a user who already took the advice has it). `--say-precision`: each batch prints the Trainer's
precision, so a test sees what an arm switched."""
import argparse

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class SayPrecision(L.Callback):
    def on_train_batch_start(self, trainer, *_):
        print("precision", trainer.precision, flush=True)


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048),
                                       torch.nn.ReLU(), torch.nn.Linear(2048, 1))

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--say-precision", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(8192, 1024), torch.randn(8192, 1))
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=20, precision=args.precision, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[SayPrecision()] if args.say_precision else [])
    trainer.fit(Model(), DataLoader(data, batch_size=256, shuffle=True))
