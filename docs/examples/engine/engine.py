"""plain.py with xtrain's Engine: the same loop, now on any accelerator, strategy and precision.

    python docs/examples/engine/engine.py                                   # one CPU process
    python docs/examples/engine/engine.py --devices 2 --strategy ddp        # two processes, DDP
"""

import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import Engine  # + 1

parser = argparse.ArgumentParser()
parser.add_argument("--accelerator", default="cpu")
parser.add_argument("--devices", type=int, default=1)
parser.add_argument("--strategy", default="auto")
parser.add_argument("--precision", default="32-true")
args = parser.parse_args()

engine = Engine(accelerator=args.accelerator, devices=args.devices, strategy=args.strategy,  # + 2
                precision=args.precision)
engine.launch()  # + 3

torch.manual_seed(0)
x = torch.randn(1024, 16)
y = x[:, :4].argmax(dim=1)  # a learnable rule
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = engine.setup(model, optimizer)  # + 4
loader = engine.setup_dataloaders(loader)  # + 5

for epoch in range(3):
    for inputs, targets in loader:
        loss = torch.nn.functional.cross_entropy(model(inputs), targets)
        optimizer.zero_grad()
        engine.backward(loss)  # changed: was loss.backward()
        optimizer.step()
    engine.print(f"epoch {epoch}: loss {loss.item():.4f}")  # changed: prints on rank 0 only
engine.save("model.ckpt", {"model": model, "optimizer": optimizer})  # changed: any strategy, atomic
