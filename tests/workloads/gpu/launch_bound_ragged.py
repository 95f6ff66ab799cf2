"""Launch-bound on a GPU with a ragged batch: 24 narrow residual layers (many kernels of a few
microseconds each, the GPU waiting on their launches) on a batch whose size changes every step, as
a loader of variable-length samples without bucketing gives. CUDA graphs (torch.compile's
reduce-overhead) record one graph per input shape: a new shape every step records again in the
timed steps."""
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(64, 64) for _ in range(24))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x)) + x
        return x


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Net().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(100000):
        x = torch.randn(16 + step % 97, 64, device="cuda")
        loss = model(x).square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
