"""Quickstart example: a small CNN on synthetic 28x28 images, with a deliberately slow input pipeline.

    advise profile examples/train_mnist_like.py --epochs 1

Each sample costs a read (a short sleep, as fetching a file from disk or object storage does)
and a little CPU work (as decoding and augmentation do), and the DataLoader has no workers,
so the training loop waits on data: the kind of waste advise finds and measures a fix for.
"""
import argparse
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class SyntheticDigits(Dataset):
    def __init__(self, n: int, work: int, read_ms: float):
        self.n, self.work, self.read_s = n, work, read_ms / 1000

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.read_s)  # stand-in for reading the file
        g = torch.Generator().manual_seed(i)
        image = torch.rand(1, 28, 28, generator=g)
        for _ in range(self.work):  # stand-in for decoding and augmentation
            image = (image + torch.roll(image, 1, dims=2)) * 0.5
        return image, i % 10


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--augment-cost", type=int, default=5)
    parser.add_argument("--read-ms", type=float, default=0.5)
    args = parser.parse_args()

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10),
    ).to(device)
    loader = DataLoader(SyntheticDigits(20_000, args.augment_cost, args.read_ms), batch_size=args.batch_size,
                        shuffle=True, num_workers=args.workers)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    for epoch in range(args.epochs):
        for images, labels in loader:
            images, labels = images.to(device), labels.to(device)
            loss = nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"epoch {epoch}: loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
