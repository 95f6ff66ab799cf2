"""No DataLoader: the loop walks a list of (inputs, targets) tensor pairs it sliced itself."""
import torch

torch.manual_seed(0)
X, Y = torch.randn(4096, 32), torch.randn(4096, 1)
pairs = list(zip(X.split(48), Y.split(48)))  # 48 samples per step; the last pair is shorter
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(100):
    for x, y in pairs[:-1]:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
