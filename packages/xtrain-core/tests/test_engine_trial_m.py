"""What an Accelerate user porting to the Engine ran into (an outside trial): each is refused with the fix, or works."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from xtrain.core import ConfigError, Engine
from xtrain.core._internal.data import prepare_dataloader


def engine() -> Engine:
    made = Engine(accelerator="cpu", devices=1)
    made.launch()
    return made


def test_an_optimizer_whose_first_group_holds_a_value_of_its_own_saves_and_loads(tmp_path: Path) -> None:
    """A learnable temperature listed first: the optimizer was taken for one the Engine did not set up."""
    e = engine()
    temperature = torch.nn.Parameter(torch.tensor(1.0))
    net = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW([{"params": [temperature], "weight_decay": 0.0}, {"params": net.parameters()}], lr=0.1)
    model, opt = e.setup(net, opt)
    e.backward((model(torch.randn(3, 4)) * temperature).pow(2).mean())
    opt.step()
    e.save(tmp_path / "c.ckpt", {"model": model, "optimizer": opt})
    saved_step = opt.state[temperature]["step"].clone()
    e.load(tmp_path / "c.ckpt", {"model": model, "optimizer": opt})
    assert torch.equal(opt.state[temperature]["step"], saved_step)


def test_accelerates_argument_order_for_save_is_refused_with_the_fix(tmp_path: Path) -> None:
    e = engine()
    model = e.setup(torch.nn.Linear(2, 2))
    with pytest.raises(ConfigError, match=r"comes first in engine.save\(path, state\)") as info:
        e.save(model.state_dict(), str(tmp_path / "x.pt"))  # type: ignore[arg-type]
    assert f"engine.save({str(tmp_path / 'x.pt')!r}, state)" in str(info.value)


def test_no_backward_sync_needs_the_set_up_module() -> None:
    e = engine()
    model = e.setup(torch.nn.Linear(2, 2))
    with pytest.raises(ConfigError, match=r"model, not model.module"):
        e.no_backward_sync(model.module)  # type: ignore[arg-type]
    with e.no_backward_sync(model):
        pass


@pytest.mark.parametrize("data", [["a", "b"], {"loss": torch.tensor(1.0), "name": "x"}, [object()]])
def test_collectives_refuse_what_they_cannot_send(data: object) -> None:
    """Strings came back as this rank's own values, silently (Accelerate raises)."""
    e = engine()
    for method in (e.all_gather, e.all_reduce):
        with pytest.raises(ConfigError, match=r"use_gather_object=True"):
            method(data)
    assert e.all_gather({"loss": torch.tensor(1.0), "n": 3, "none": None})["n"].tolist() == [3]


def test_a_dataloader_generator_that_the_distributed_order_ignores_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from xtrain.core.rank_zero import rank_zero_only

    monkeypatch.setattr(rank_zero_only, "rank", 0)  # rank 0 warns (an earlier run in this process may have left 1)
    loader = DataLoader(list(range(8)), batch_size=2, shuffle=True, generator=torch.Generator().manual_seed(1))
    with pytest.warns(UserWarning, match=r"DataLoader\(generator=\.\.\.\) does not choose the shuffle order"):
        prepare_dataloader(loader, distributed={"num_replicas": 2, "rank": 0}, use_distributed_sampler=True,
                           training=True)
    with warnings.catch_warnings():  # one process: the generator does choose the order, nothing to say
        warnings.simplefilter("error")
        prepare_dataloader(loader, distributed=None, use_distributed_sampler=True, training=True)
