"""pin_memory=True on a machine without an accelerator: torch warns when the loader is iterated."""
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(1024, 16), torch.randn(1024, 1)), batch_size=32, pin_memory=True)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(100):
    for x, y in loader:  # PIN_MEMORY_LINE: the warning belongs here
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
