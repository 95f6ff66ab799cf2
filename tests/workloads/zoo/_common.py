"""Shared bits of the zoo scripts: a forever-running training loop (the probe stops it)."""
import torch


def train_forever(model, loader, opt, loss_fn=torch.nn.functional.mse_loss, epochs=1000):
    for _ in range(epochs):
        for x, y in loader:
            loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
