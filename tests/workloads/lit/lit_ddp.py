"""A Lightning job on CPU with two DDP ranks (strategy="ddp"): Lightning re-runs this script as a
new command for rank 1 (`python lit_ddp.py ...` with LOCAL_RANK=1), rank 0 is the script's own
process. `--sleep-rank R --sleep-ms MS`: rank R computes MS longer each step (a straggler).
`--item-ms MS`: every sample takes MS to load (a DataLoader without workers starves the ranks)."""
import argparse
import time

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Slow(torch.utils.data.Dataset):
    def __init__(self, data, item_ms: float):
        self.data, self.item_ms = data, item_ms

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        time.sleep(self.item_ms / 1000)
        return self.data[i]


class Model(L.LightningModule):
    def __init__(self, sleep_rank: int, sleep_ms: float):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        self.sleep_rank, self.sleep_ms = sleep_rank, sleep_ms

    def training_step(self, batch, _):
        x, y = batch
        if self.global_rank == self.sleep_rank:
            time.sleep(self.sleep_ms / 1000)
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--sleep-rank", type=int, default=-1)
    parser.add_argument("--sleep-ms", type=float, default=0.0)
    parser.add_argument("--item-ms", type=float, default=0.0)
    args = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(4096, 32), torch.randn(4096, 1))
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=5, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Model(args.sleep_rank, args.sleep_ms), DataLoader(Slow(data, args.item_ms) if args.item_ms else data, batch_size=16))
    print(f"FIT DONE on rank {trainer.global_rank}")
