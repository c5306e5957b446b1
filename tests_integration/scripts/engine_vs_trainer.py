"""Train the same model with a plain loop on the Engine or with the Trainer; rank 0 saves the final weights.

    python engine_vs_trainer.py engine|trainer OUT --strategy ddp --devices 2
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from torch.utils.data import DataLoader

from xtrain.core import Engine, Trainer, seed_everything
from xtrain.core.testing import TinyClassifier, tiny_dataset

STEPS = 12


class Module(TinyClassifier):
    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


def loader() -> DataLoader[Any]:
    return DataLoader(tiny_dataset(192), batch_size=8, shuffle=True)


def with_engine(args: argparse.Namespace) -> dict[str, torch.Tensor] | None:
    engine = Engine(accelerator="cpu", devices=args.devices, strategy=args.strategy)
    if args.strategy in ("ddp_spawn", "ddp_fork"):
        return engine.launch(engine_loop)  # spawn-style: the loop runs in workers; rank 0's result comes back
    engine.launch()
    return engine_loop(engine)


def engine_loop(engine: Engine) -> dict[str, torch.Tensor] | None:
    seed_everything(5)
    module = Module()
    model, optimizer = engine.setup(module, module.configure_optimizers())
    data = engine.setup_dataloaders(loader())
    done = 0
    while done < STEPS:
        for x, y in data:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            engine.backward(loss)
            optimizer.step()
            done += 1
            if done == STEPS:
                break
    return full_weights(module, engine.is_global_zero)


def with_trainer(args: argparse.Namespace) -> dict[str, torch.Tensor] | None:
    seed_everything(5)
    module = Module()
    trainer = Trainer(accelerator="cpu", devices=args.devices, strategy=args.strategy, max_steps=STEPS,
                      logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      num_sanity_val_steps=0)
    trainer.fit(module, loader())
    return full_weights(module, trainer.is_global_zero)


def full_weights(module: torch.nn.Module, zero: bool) -> dict[str, torch.Tensor] | None:
    """The module's weights on rank 0; sharded ones (FSDP's DTensors) are gathered whole by every rank."""
    state = {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in module.state_dict().items()}
    return {k: v.detach().clone() for k, v in state.items()} if zero else None


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["engine", "trainer"])
    p.add_argument("out")
    p.add_argument("--strategy", default="ddp")
    p.add_argument("--devices", type=int, default=2)
    args = p.parse_args()
    weights = (with_engine if args.mode == "engine" else with_trainer)(args)
    if weights is not None:
        torch.save({k: v.detach().clone() for k, v in weights.items()}, args.out)


if __name__ == "__main__":
    main()
