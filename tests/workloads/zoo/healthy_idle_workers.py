"""Healthy control: 4 DataLoader workers that exist but sit idle, beside 1 intra-op thread.

The workers serve whole in-memory batches (one indexing op each via a BatchSampler) and have
prefetched far ahead of a ~100 ms step: they wait, they do not compete. Counted as they exist,
1 thread + 4 workers would read as 5 threads on 2 cores; that counting read "6 busy threads
compete for 2 cores" on minGPT's chargpt at 2% data wait; its fix (1 thread, 1 worker) was 0.62x by hand. The model is
healthy_one_worker's: matmuls under PR001's 100 MFLOP floor, SGD's loop a few % of the step.

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
    loader = DataLoader(data, batch_size=None, sampler=sampler, num_workers=4, persistent_workers=True,
                        prefetch_factor=4)
    train_forever(model, loader, torch.optim.SGD(model.parameters(), lr=0.01))
