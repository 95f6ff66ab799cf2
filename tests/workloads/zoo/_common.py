"""Shared bits of the zoo scripts: a forever-running training loop (the probe stops it)."""
import torch


def train_forever(model, loader, opt, loss_fn=torch.nn.functional.mse_loss, epochs=1000):
    for _ in range(epochs):
        for x, y in loader:
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()


class InMemoryBatches(torch.utils.data.Dataset):
    """8192 samples in memory, served a whole batch per call (index with a BatchSampler's list)."""

    def __init__(self):
        self.x, self.y = torch.randn(8192, 256), torch.randn(8192, 1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, idx):
        return self.x[idx], self.y[idx]


def train_deep_mlp_from_workers(num_workers: int) -> None:
    """41 layers 512 wide (~67 MFLOP matmuls at batch 128, under PR001's floor), fed whole
    batches by `num_workers` persistent workers, each prefetching 4."""
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    torch.manual_seed(0)
    data = InMemoryBatches()
    layers = [torch.nn.Linear(256, 512), torch.nn.ReLU()]
    for _ in range(40):
        layers += [torch.nn.Linear(512, 512), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(512, 1))
    sampler = BatchSampler(RandomSampler(data), batch_size=128, drop_last=True)
    loader = DataLoader(data, batch_size=None, sampler=sampler, num_workers=num_workers, persistent_workers=True,
                        prefetch_factor=4)
    train_forever(model, loader, torch.optim.SGD(model.parameters(), lr=0.01))
