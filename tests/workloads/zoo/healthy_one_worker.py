"""Healthy control: one persistent worker serving whole batches from memory, one intra-op thread.

Threads plus workers fit the 2 cores; the worker needs well under a millisecond per batch
(one indexing op via a BatchSampler), the model's 41 layers about a hundred milliseconds;
four batches are prefetched, so a worker briefly descheduled on a busy machine is absorbed.
Each matmul is ~67 MFLOP (batch 128, 512 wide), under PR001's 100 MFLOP floor: on a CPU with
native bf16 (AMX) a few wide fp32 matmuls would rightly be told to use bf16, which a control must
not be; and ~770 FLOPs per parameter a step keep SGD's per-tensor loop a few % of it (CPU002).
(Handing a batch over from a worker costs the loop about 2 ms on this 2-core machine even then,
measured without advise: a step of 20 ms would read as 10% data wait, DL001's threshold.)

advise-expect: none
"""
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

from _common import train_forever


class InMemory(Dataset):
    def __init__(self):
        self.x, self.y = torch.randn(8192, 256), torch.randn(8192, 1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, idx):  # idx: a list of indices, one call per batch
        return self.x[idx], self.y[idx]


if __name__ == "__main__":
    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = InMemory()
    layers = [torch.nn.Linear(256, 512), torch.nn.ReLU()]
    for _ in range(40):
        layers += [torch.nn.Linear(512, 512), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(512, 1))
    sampler = BatchSampler(RandomSampler(data), batch_size=128, drop_last=True)
    loader = DataLoader(data, batch_size=None, sampler=sampler, num_workers=1, persistent_workers=True,
                        prefetch_factor=4)
    train_forever(model, loader, torch.optim.SGD(model.parameters(), lr=0.01))
