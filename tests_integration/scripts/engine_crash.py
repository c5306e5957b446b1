"""A plain loop on the Engine under ddp; rank 1 raises at step 3 and rank 0 would otherwise wait in a collective."""

from __future__ import annotations

import time

import torch

from xtrain.core import Engine

engine = Engine(accelerator="cpu", devices=2, strategy="ddp")
engine.launch()
model, optimizer = engine.setup(torch.nn.Linear(4, 1), torch.optim.SGD(torch.nn.Linear(4, 1).parameters(), lr=0.1))
optimizer = engine.setup_optimizers(torch.optim.SGD(model.parameters(), lr=0.1))
print(f"rank {engine.global_rank} started at {time.time():.3f}", flush=True)
for step in range(1000):
    if engine.global_rank == 1 and step == 3:
        print(f"rank 1 raising at {time.time():.3f}", flush=True)
        raise RuntimeError("rank 1 failed inside the user's loop")
    loss = model(torch.randn(8, 4)).pow(2).mean()
    optimizer.zero_grad()
    engine.backward(loss)
    optimizer.step()
print("unreachable", flush=True)
