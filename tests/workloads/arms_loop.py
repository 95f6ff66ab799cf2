"""Reports, from inside its own loop, the settings an arm switches, and counts batches per epoch.

Each step writes one JSON line to the file named by --log (its time, epoch, the settings seen in
forward and the optimizer's flags); each epoch's end writes its batch count next to len(loader).
--crash-under-autocast raises inside forward when autocast is on (a crash inside an arm).
"""
import argparse
import json
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Data(Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 3, 8, 8, generator=g), torch.randn(n, 1, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i], os.getpid()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8 * 8 * 8, 1)

    def forward(self, x):
        self.seen = {"autocast": torch.is_autocast_enabled("cpu"),
                     "cl_input": x.is_contiguous(memory_format=torch.channels_last),
                     "conv_cl": self.conv.weight.is_contiguous(memory_format=torch.channels_last)}
        if ARGS.crash_under_autocast and self.seen["autocast"]:
            raise RuntimeError("boom under autocast")
        out = self.head(self.conv(x).flatten(1))
        self.seen["head_dtype"] = str(out.dtype).replace("torch.", "")
        return out


parser = argparse.ArgumentParser()
parser.add_argument("--log", required=True)
parser.add_argument("--epochs", type=int, default=1000)
parser.add_argument("--n", type=int, default=200)
parser.add_argument("--crash-under-autocast", action="store_true")
parser.add_argument("--workers", type=int, default=0, help="the loader's workers, forked anew each epoch")
ARGS = parser.parse_args()

if __name__ == "__main__":
    torch.manual_seed(0)
    loader = DataLoader(Data(ARGS.n), batch_size=16, shuffle=True, num_workers=ARGS.workers)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    main = os.getpid()
    with open(ARGS.log, "a", buffering=1) as log:
        for epoch in range(ARGS.epochs):
            batches = 0
            for x, y, pids in loader:
                batches += 1
                out = model(x)
                loss = torch.nn.functional.mse_loss(out.float(), y)
                opt.zero_grad()
                loss.backward()
                group = opt.param_groups[0]
                log.write(json.dumps({
                    "t": time.monotonic(), "epoch": epoch, "x_batch": len(x), "workers": sorted({int(p) for p in pids} - {main}),
                    "foreach": group.get("foreach"), "fused": group.get("fused"),
                    "precision": torch.get_float32_matmul_precision(), "threads": torch.get_num_threads(), **model.seen,
                    "out_dtype": str(out.dtype).replace("torch.", ""),
                }) + "\n")
                opt.step()
            log.write(json.dumps({"epoch_end": epoch, "batches": batches, "len": len(loader)}) + "\n")
