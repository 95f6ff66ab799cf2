"""Planted: CPU-heavy per-sample decoding/augmentation in the main process (num_workers=0).

advise-expect: DL001 exclusive
"""
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

from _common import train_forever


class DecodedImages(Dataset):
    def __len__(self):
        return 50_000

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        image = torch.rand(3, 32, 32, generator=g)
        for _ in range(40):  # stands for JPEG decoding and augmentation (well above DL001's 5 ms floor)
            image = (image + torch.roll(image, 1, dims=2)) * 0.5
        return image.flatten(), torch.tensor([float(i % 10)])


if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3 * 32 * 32, 64), nn.ReLU(), nn.Linear(64, 1))
    loader = DataLoader(DecodedImages(), batch_size=32, shuffle=True)
    train_forever(model, loader, torch.optim.SGD(model.parameters(), lr=0.01))
