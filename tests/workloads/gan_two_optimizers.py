"""Two optimizers stepping in one iteration (a GAN): one step must be one iteration."""
import sys

import torch

g, d = torch.nn.Linear(8, 8), torch.nn.Linear(8, 1)
opt_g = torch.optim.Adam(g.parameters(), lr=1e-3)
opt_d = torch.optim.Adam(d.parameters(), lr=1e-3)
for it in range(1000):
    print(f"iter {it}", file=sys.stderr, flush=True)
    real, z = torch.randn(16, 8), torch.randn(16, 8)
    loss_d = d(real).mean() - d(g(z).detach()).mean()
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()
    loss_g = -d(g(z)).mean()
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
