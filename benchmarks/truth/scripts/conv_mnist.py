"""A conv net trained the way pytorch/examples mnist/main.py trains it: its Net (two 3x3 convs,
max-pool, dropout, two linears), Adadelta with StepLR, its argparse flags, a test pass and an
optional checkpoint after every epoch. The data is MNIST-shaped and synthetic (uint8 28x28 images,
labels from a fixed random teacher), made per sample as torchvision's ToTensor and Normalize make
it, because torchvision does not load beside this machine's CPU torch. Prints one timing line per
training step (issue 65's conv-net shape; with a small --train-size, the real-loops shape).
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Dataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dropout2(x)
        return F.log_softmax(self.fc2(x), dim=1)


class SyntheticMNIST(Dataset):
    """n uint8 images and their labels, each sample scaled and normalized when it is read."""

    def __init__(self, n: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g)
        teacher = torch.randn(28 * 28, 10, generator=torch.Generator().manual_seed(1))
        self.labels = (self.images.flatten(1).float() @ teacher).argmax(1)

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        x = self.images[i].float().div(255).unsqueeze(0)
        return (x - 0.1307) / 0.3081, self.labels[i]


def train(args, model, device, train_loader, optimizer, epoch, clock):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        now = time.perf_counter()
        if clock[0] is not None:
            print(f"iter {clock[1]}: loss {loss.item():.4f}, time {(now - clock[0]) * 1e3:.2f}ms", flush=True)
        clock[0], clock[1] = now, clock[1] + 1
        if args.dry_run:
            break


def test(model, device, test_loader):
    model.eval()
    test_loss, correct = 0, 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            correct += output.argmax(dim=1).eq(target).sum().item()
    n = len(test_loader.dataset)
    print(f"Test set: Average loss: {test_loss / n:.4f}, Accuracy: {correct}/{n} ({100.0 * correct / n:.0f}%)", flush=True)


def main():
    parser = argparse.ArgumentParser(description="PyTorch MNIST Example")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--test-batch-size", type=int, default=1000)
    parser.add_argument("--epochs", type=int, default=14)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--no-accel", action="store_true")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--save-model", action="store_true")
    parser.add_argument("--train-size", type=int, default=60000)
    parser.add_argument("--test-size", type=int, default=10000)
    args = parser.parse_args()

    use_accel = not args.no_accel and torch.accelerator.is_available()
    torch.manual_seed(args.seed)
    device = torch.accelerator.current_accelerator() if use_accel else torch.device("cpu")
    train_kwargs = {"batch_size": args.batch_size, "shuffle": True}
    test_kwargs = {"batch_size": args.test_batch_size}
    if use_accel:
        train_kwargs.update({"num_workers": 1, "pin_memory": True})
        test_kwargs.update({"num_workers": 1, "pin_memory": True})
    train_loader = DataLoader(SyntheticMNIST(args.train_size, seed=2), **train_kwargs)
    test_loader = DataLoader(SyntheticMNIST(args.test_size, seed=3), **test_kwargs)

    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    clock = [None, 0]
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch, clock)
        test(model, device, test_loader)
        scheduler.step()
        if args.save_model:
            torch.save(model.state_dict(), "mnist_cnn.pt")


if __name__ == "__main__":
    main()
