"""For one seed, xtrain trains on the batches Lightning 2.x does, in the same order, with or without validation.

Lightning cannot be imported here (it is not installed in CI), so each test compares xtrain with a plain PyTorch loop
over the same DataLoader that makes the draws from the global torch generator that Lightning's ``Trainer.fit`` makes
for a single-process run with ``num_workers=0`` (read from Lightning 2.6's source and confirmed by running the same
script under Lightning and under xtrain side by side):

1. ``seed_everything(seed)``, then the model and the dataloaders are built (whatever they draw).
2. The sanity check (``num_sanity_val_steps != 0`` and a val loader) runs inside ``isolate_rng()``: it saves the
   torch, CUDA, NumPy and Python generators and restores them afterwards, so its draws (the val iterator's base seed,
   any randomness in ``validation_step``) leave no trace.
3. Every training epoch: ``iter(train_loader)`` draws one int64 (``_BaseDataLoaderIter``'s ``_base_seed``, drawn
   for every iterator even without workers), then the first ``next`` draws one more (``RandomSampler``'s seed for
   that epoch's ``randperm``); the epoch's batches follow with no further draw from the loader.
4. Every validation run (by default after the epoch's last batch): ``iter(val_loader)`` draws its base seed; a
   ``SequentialSampler`` draws nothing.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import Callback, Trainer, TrainModule, seed_everything

EPOCHS = 3


class Recorder(TrainModule):
    def __init__(self, draw_in_validation: bool = False) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.order: list[list[int]] = []
        self.draw_in_validation = draw_in_validation

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, idx = batch
        self.order.append(idx.tolist())
        return ((self.layer(x).squeeze(-1) - y) ** 2).mean()

    def validation_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        if self.draw_in_validation:
            torch.rand(3), random.random(), np.random.rand()
        return ((self.layer(x).squeeze(-1) - y) ** 2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def build(with_val: bool, seed: int = 42) -> tuple[Recorder, DataLoader[Any], DataLoader[Any] | None]:
    seed_everything(seed)
    model = Recorder()
    x, y = torch.randn(24, 4), torch.randn(24)
    train = DataLoader(TensorDataset(x, y, torch.arange(24)), batch_size=4, shuffle=True)
    val = DataLoader(TensorDataset(x[:8], y[:8], torch.arange(8)), batch_size=4) if with_val else None
    return model, train, val


def lightning_order(with_val: bool) -> list[list[int]]:
    """The batches Lightning trains on, by the draws listed in the module docstring (step 2 draws nothing)."""
    _, train, val = build(with_val)
    order: list[list[int]] = []
    for _ in range(EPOCHS):
        order += [idx.tolist() for _, _, idx in train]  # iter: base seed; first next: RandomSampler's seed
        if val is not None:
            for _ in val:  # iter: the val iterator's base seed
                pass
    return order


def quiet(**kwargs: Any) -> Trainer:
    kwargs.setdefault("max_epochs", EPOCHS)
    return Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False, accelerator="cpu", devices=1, **kwargs)


@pytest.mark.parametrize("with_val", [False, True], ids=["no_val", "val"])
@pytest.mark.parametrize("sanity", [0, 2, -1])
def test_batch_order_equals_lightning_draws(with_val: bool, sanity: int) -> None:
    model, train, val = build(with_val)
    quiet(num_sanity_val_steps=sanity).fit(model, train, val)
    expected = lightning_order(with_val)
    assert len(model.order) == EPOCHS * 6
    assert model.order == expected


def test_sanity_check_leaves_every_global_generator_as_it_found_it() -> None:
    states: dict[str, Any] = {}

    class Snapshot(Callback):
        def on_sanity_check_start(self, trainer: Any, module: Any) -> None:
            states["before"] = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())

        def on_sanity_check_end(self, trainer: Any, module: Any) -> None:
            states["during"] = torch.get_rng_state()

        def on_train_start(self, trainer: Any, module: Any) -> None:
            states["after"] = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())

    model, train, val = build(True)
    model.draw_in_validation = True
    quiet(max_epochs=1, num_sanity_val_steps=2, callbacks=[Snapshot()]).fit(model, train, val)
    (torch_before, py_before, np_before), (torch_after, py_after, np_after) = states["before"], states["after"]
    assert not torch.equal(states["during"], torch_before)  # the sanity check did draw
    assert torch.equal(torch_after, torch_before)
    assert py_after == py_before
    assert np.array_equal(np_after, np_before)
