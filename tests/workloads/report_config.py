"""Prints, from inside its own training loop, the settings the overrides are meant to change."""
import json
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.head = torch.nn.Linear(8 * 8 * 8, 1)

    def forward(self, x):
        self.seen = {"autocast": torch.is_autocast_enabled("cpu"), "cl_input": x.is_contiguous(memory_format=torch.channels_last)}
        h = self.conv(x)
        out = self.head(h.flatten(1))
        self.seen["head_dtype"] = str(out.dtype)
        return out


if __name__ == "__main__":
    data = TensorDataset(torch.randn(512, 3, 8, 8), torch.randn(512, 1))
    loader = DataLoader(data, 16, True)  # positional batch_size and shuffle
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 0:
            print("CONFIG=" + json.dumps({
                "num_workers": loader.num_workers, "pin_memory": loader.pin_memory, "batch_size": loader.batch_size,
                "persistent_workers": loader.persistent_workers, "fused": opt.param_groups[0].get("fused"),
                "foreach": opt.param_groups[0].get("foreach"),
                "matmul_precision": torch.get_float32_matmul_precision(), "cudnn_benchmark": torch.backends.cudnn.benchmark,
                "threads": torch.get_num_threads(), "x_batch": len(x), **model.seen,
                "conv_weight_cl": model.conv.weight.is_contiguous(memory_format=torch.channels_last),
            }), file=sys.stderr, flush=True)
