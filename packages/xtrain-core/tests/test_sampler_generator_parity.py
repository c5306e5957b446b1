"""``DataLoader(shuffle=True, generator=g)``: the resumable sampler draws as ``RandomSampler`` does.

PyTorch permutes with ``g`` itself (``torch.randperm(n, generator=g)``), so a Trainer run must see the batches a
plain PyTorch loop sees and leave ``g`` in the same state; a resumed run must see the rest of the interrupted
epoch and the next epochs exactly, and leave ``g`` where the uninterrupted run left it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from xtrain.core import Callback, Trainer, TrainModule
from xtrain.core._internal.data import prepare_dataloader, resumable_sampler

_EPOCHS = 3


def _loader(n: int = 32, batch_size: int = 8, drop_last: bool = False, workers: int = 0) -> DataLoader[Any]:
    return DataLoader(TensorDataset(torch.arange(n)), batch_size=batch_size, shuffle=True, drop_last=drop_last,
                      num_workers=workers, generator=torch.Generator().manual_seed(1234))


def _plain(loader: DataLoader[Any], epochs: int = _EPOCHS) -> tuple[list[list[int]], torch.Tensor]:
    batches = [batch[0].tolist() for _ in range(epochs) for batch in loader]
    assert loader.generator is not None
    return batches, loader.generator.get_state()


class _Net(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(1, 1)
        self.seen: list[list[int]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append(batch[0].tolist())
        return self.lin(batch[0].float().unsqueeze(1)).sum()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


class _SaveAt(Callback):
    """Saves a checkpoint after batch ``batch`` of epoch ``epoch``."""

    def __init__(self, path: Path, epoch: int, batch: int) -> None:
        self.path, self.epoch, self.batch = path, epoch, batch

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.current_epoch == self.epoch and batch_idx == self.batch:
            trainer.save_checkpoint(self.path)


def _fit(loader: DataLoader[Any], root: Path, ckpt: Path | None = None, callbacks: list[Any] | None = None,
         **limits: Any) -> tuple[list[list[int]], torch.Tensor]:
    module = _Net()
    Trainer(default_root_dir=root, accelerator="cpu", logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks or [],
            **({"max_epochs": _EPOCHS} | limits)).fit(module, loader, ckpt_path=ckpt)
    assert loader.generator is not None
    return module.seen, loader.generator.get_state()


@pytest.mark.parametrize(("n", "drop_last"), [(32, False), (30, False), (30, True)],
                         ids=["even", "partial-last-batch", "drop-last"])
def test_a_fit_sees_the_batches_and_leaves_the_generator_as_a_plain_loop(tmp_path: Path, n: int,
                                                                         drop_last: bool) -> None:
    batches, state = _plain(_loader(n, drop_last=drop_last))
    seen, after = _fit(_loader(n, drop_last=drop_last), tmp_path)
    assert seen == batches
    assert torch.equal(after, state)


@pytest.mark.parametrize(("epoch", "batch", "workers"), [(1, 1, 0), (0, 0, 0), (1, 3, 0), (1, 1, 1)],
                         ids=["mid-epoch", "first-batch", "last-batch", "workers"])
def test_a_resume_from_inside_an_epoch_sees_what_the_uninterrupted_run_saw(tmp_path: Path, epoch: int, batch: int,
                                                                           workers: int) -> None:
    path = tmp_path / "mid.ckpt"
    seen, after = _fit(_loader(workers=workers), tmp_path / "a", callbacks=[_SaveAt(path, epoch, batch)])
    assert seen == _plain(_loader())[0]
    resumed, resumed_after = _fit(_loader(workers=workers), tmp_path / "b", ckpt=path)
    assert resumed == seen[epoch * 4 + batch + 1:]
    assert torch.equal(resumed_after, after)


def test_a_resume_at_an_epoch_end_sees_what_the_uninterrupted_run_saw(tmp_path: Path) -> None:
    seen, after = _fit(_loader(), tmp_path / "a")
    checkpoint = tmp_path / "end.ckpt"
    trainer = Trainer(default_root_dir=tmp_path / "b", accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, max_epochs=1)
    trainer.fit(_Net(), _loader())
    trainer.save_checkpoint(checkpoint)  # after the epoch's end
    resumed, resumed_after = _fit(_loader(), tmp_path / "c", ckpt=checkpoint)
    assert resumed == seen[4:]
    assert torch.equal(resumed_after, after)


def _sampler(loader: DataLoader[Any]) -> Any:
    prepared = prepare_dataloader(loader, distributed=None, use_distributed_sampler=True, training=True)
    sampler = resumable_sampler(prepared)
    assert sampler is not None and sampler.draws_from_generator
    return prepared, sampler


def test_the_sampler_state_resumes_the_epoch_and_the_next() -> None:
    straight, _ = _sampler(_loader())
    list(straight)  # epoch 0
    data = iter(straight)
    head = [next(data)[0].tolist() for _ in range(2)]
    state = resumable_sampler(straight).state_dict()  # type: ignore[union-attr]
    rest = [batch[0].tolist() for batch in data] + [batch[0].tolist() for batch in straight]
    assert straight.generator is not None
    end = straight.generator.get_state()

    loader = _loader()
    assert loader.generator is not None
    loader.generator.manual_seed(99)  # a fresh process's generator: the state below replaces it
    prepared, sampler = _sampler(loader)
    sampler.restore_generator(state["generator_state"], epoch_seed=state["epoch_seed"], mid_epoch=True)
    sampler.resume(epoch_seed=state["epoch_seed"], offset=2 * 8)
    again = [batch[0].tolist() for batch in prepared] + [batch[0].tolist() for batch in prepared]
    assert again == rest
    assert sorted(i for batch in head + again[:2] for i in batch) == list(range(32))
    assert torch.equal(loader.generator.get_state(), end)


def test_a_checkpoint_of_the_former_form_repeats_its_epoch_as_it_was_drawn() -> None:
    """Former checkpoints hold the seed drawn from ``g`` and ``g`` after that draw; the epoch's order came from a
    generator seeded with it. A resume keeps that order for the interrupted epoch and ``g`` as it was saved."""
    g = torch.Generator().manual_seed(5)
    torch.empty((), dtype=torch.int64).random_(generator=g)  # the DataLoader's base seed
    seed = int(torch.empty((), dtype=torch.int64).random_(generator=g).item())
    order = torch.randperm(32, generator=torch.Generator().manual_seed(seed)).tolist()
    saved = g.get_state()

    loader = _loader()
    prepared, sampler = _sampler(loader)
    sampler.restore_generator(saved, epoch_seed=seed, mid_epoch=True)
    sampler.resume(epoch_seed=seed, offset=8)
    assert [i for batch in prepared for i in batch[0].tolist()] == order[8:]
    assert loader.generator is not None and torch.equal(loader.generator.get_state(), saved)
