"""Exact resume when the training DataLoader shuffles with its own generator (``DataLoader(generator=g)``).

Each epoch's permutation seed is drawn from that generator, which the checkpoint's ``rng`` entry (the global
generators) does not cover: a resumed run drew from a freshly seeded one and trained on other batches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import DataModule, Trainer, TrainModule, seed_everything
from xtrain.core.errors import CheckpointError

_X = torch.randn(32, 4, generator=torch.Generator().manual_seed(1))
_Y = _X.sum(1, keepdim=True)


class _Net(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)  # type: ignore[no-any-return]

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self(batch[0]), batch[1])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _loader(workers: int = 0) -> DataLoader[Any]:
    """What a user writes for reproducible shuffling; a fresh generator each time, as a fresh process has."""
    return DataLoader(TensorDataset(_X, _Y), batch_size=8, shuffle=True, num_workers=workers,
                      generator=torch.Generator().manual_seed(42))


def _fit(root: Path, ckpt: str | None = None, workers: int = 0, **limits: Any) -> torch.Tensor:
    seed_everything(0)
    module = _Net()
    Trainer(default_root_dir=root, logger=False, enable_progress_bar=False, enable_model_summary=False,
            **limits).fit(module, _loader(workers), ckpt_path=ckpt)
    return module.lin.weight.detach().clone()


def test_resume_at_an_epoch_boundary_draws_the_seeds_an_uninterrupted_run_draws(tmp_path: Path) -> None:
    straight = _fit(tmp_path / "a", max_epochs=4)
    _fit(tmp_path / "b", max_epochs=2)
    saved = torch.load(tmp_path / "b" / "checkpoints" / "last.ckpt", weights_only=True)["sampler"]
    assert saved["generator_state"].dtype == torch.uint8
    assert torch.equal(_fit(tmp_path / "b", "last", max_epochs=4), straight)


@pytest.mark.parametrize("workers", [0, 1])
def test_resume_mid_epoch_is_exact_with_a_shuffle_generator(tmp_path: Path, workers: int) -> None:
    """``iter(loader)`` draws the DataLoader's base seed from the generator again on resume: it must not count."""
    straight = _fit(tmp_path / "a", workers=workers, max_epochs=3)
    _fit(tmp_path / "b", workers=workers, max_steps=6)  # 4 batches an epoch: stopped in the second
    saved = torch.load(tmp_path / "b" / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["loops"]["batches_in_epoch"] == 2
    assert torch.equal(_fit(tmp_path / "b", "last", workers=workers, max_epochs=3), straight)


class _Data(DataModule):
    """Builds its loader, and the loader's generator, in ``train_dataloader``: after the restore has run."""

    def train_dataloader(self) -> DataLoader[Any]:
        return _loader()


def _fit_data(root: Path, ckpt: str | None = None, **limits: Any) -> torch.Tensor:
    seed_everything(0)
    module = _Net()
    Trainer(default_root_dir=root, logger=False, enable_progress_bar=False, enable_model_summary=False,
            **limits).fit(module, datamodule=_Data(), ckpt_path=ckpt)
    return module.lin.weight.detach().clone()


@pytest.mark.parametrize("stop", [{"max_epochs": 2}, {"max_steps": 6}])
def test_a_generator_built_in_train_dataloader_is_restored_too(tmp_path: Path, stop: dict[str, int]) -> None:
    straight = _fit_data(tmp_path / "a", max_epochs=4)
    _fit_data(tmp_path / "b", **stop)
    assert torch.equal(_fit_data(tmp_path / "b", "last", max_epochs=4), straight)


def test_a_checkpoint_without_the_generator_state_still_loads(tmp_path: Path) -> None:
    """Checkpoints written before the state was saved resume as they did (from the fresh generator)."""
    _fit(tmp_path, max_epochs=1)
    path = tmp_path / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(path, weights_only=True)
    del checkpoint["sampler"]["generator_state"]
    old = tmp_path / "checkpoints" / "old.ckpt"
    torch.save(checkpoint, old)
    _fit(tmp_path, str(old), max_epochs=2)


@pytest.mark.parametrize("bad", [torch.zeros(5056, dtype=torch.int64), torch.zeros(7, dtype=torch.uint8),
                                 torch.zeros(2, 5056, dtype=torch.uint8), "state", [1, 2]],
                         ids=["dtype", "size", "shape", "str", "list"])
def test_a_wrong_generator_state_is_refused_before_anything_is_loaded(tmp_path: Path, bad: Any) -> None:
    _fit(tmp_path, max_epochs=1)
    checkpoint = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    checkpoint["sampler"]["generator_state"] = bad
    damaged = tmp_path / "damaged.ckpt"
    torch.save(checkpoint, damaged)
    seed_everything(0)
    module, loader = _Net(), _loader()
    weights, generator = module.lin.weight.detach().clone(), loader.generator
    assert generator is not None
    before = generator.get_state()
    trainer = Trainer(default_root_dir=tmp_path / "r", max_epochs=2, logger=False, enable_progress_bar=False,
                      enable_model_summary=False)
    with pytest.raises(CheckpointError, match=r"(?s)damaged\.ckpt.*nothing was loaded.*sampler\.generator_state"):
        trainer.fit(module, loader, ckpt_path=str(damaged))
    assert torch.equal(module.lin.weight, weights)
    assert torch.equal(generator.get_state(), before)
    assert trainer.global_step == 0
