"""What ``val_dataloader()`` and its siblings may return, read as Lightning reads it (outside trial DL): a dict's
values and a sequential ``CombinedLoader``'s loaders are several loaders; ``mode="max_size"`` is one whose batches
combine one of each; a stream without a length validates at every epoch's end."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from xtrain.core import ConfigError, Trainer, TrainModule
from xtrain.core.combined_loader import CombinedLoader


class Indexed(Dataset[torch.Tensor]):
    def __init__(self, n: int, offset: int = 0) -> None:
        self.n, self.offset = n, offset

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([float(i + self.offset)])


class Stream(IterableDataset[torch.Tensor]):
    def __iter__(self) -> Any:
        return (torch.tensor([float(i)]) for i in range(5))


class Records(TrainModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(1, 1)
        self.seen: list[tuple[str, Any, int, int]] = []

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self.net(batch).sum()

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.seen.append(("val", _ids(batch), batch_idx, dataloader_idx))
        self.log("v", float(dataloader_idx))

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.seen.append(("test", _ids(batch), batch_idx, dataloader_idx))

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> Any:
        return _ids(batch)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _ids(batch: Any) -> Any:
    if isinstance(batch, dict):
        return {k: _ids(v) for k, v in batch.items()}
    if batch is None:
        return None
    return [int(x) for x in batch.flatten()]


def _trainer(**options: Any) -> Trainer:
    return Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False, **options)


def _a() -> DataLoader[torch.Tensor]:
    return DataLoader(Indexed(3), batch_size=2)


def _b() -> DataLoader[torch.Tensor]:
    return DataLoader(Indexed(2, 100), batch_size=2)


SEQUENTIAL = [("val", [0, 1], 0, 0), ("val", [2], 1, 0), ("val", [100, 101], 0, 1)]


@pytest.mark.parametrize("shape", ["dict", "sequential"])
def test_a_dict_or_a_sequential_combined_loader_validates_each_loader_in_turn(shape: str) -> None:
    module = Records()
    given: Any = {"x": _a(), "y": _b()} if shape == "dict" else CombinedLoader([_a(), _b()], "sequential")
    trainer = _trainer(max_epochs=1, num_sanity_val_steps=0, limit_train_batches=1)
    trainer.fit(module, DataLoader(Indexed(2), batch_size=2), given)
    assert module.seen == SEQUENTIAL
    assert sorted(trainer.callback_metrics) == ["v/dataloader_idx_0", "v/dataloader_idx_1"]
    if shape == "dict":
        assert list(trainer.val_dataloaders) == ["x", "y"]


def test_test_and_predict_take_a_dict_of_loaders() -> None:
    module = Records()
    results = _trainer().test(module, {"a": _a(), "b": _b()}, verbose=False)
    assert len(results) == 2 and [s[3] for s in module.seen] == [0, 0, 1]
    assert _trainer().predict(module, {"a": _a(), "b": _b()}) == [[[0, 1], [2]], [[100, 101]]]


def test_other_modes_combine_one_batch_of_each_and_predict_refuses_them() -> None:
    module = Records()
    _trainer().test(module, CombinedLoader({"a": _a(), "b": _b()}, "max_size"), verbose=False)
    assert module.seen == [("test", {"a": [0, 1], "b": [100, 101]}, 0, 0), ("test", {"a": [2], "b": None}, 1, 0)]
    module.seen.clear()
    _trainer().test(module, CombinedLoader({"a": _a(), "b": _b()}, "min_size"), verbose=False)  # as Lightning
    assert module.seen == [("test", {"a": [0, 1], "b": [100, 101]}, 0, 0)]
    with pytest.raises(ConfigError, match=r"CombinedLoader\(mode='max_size'\)\"?: predict runs the loaders one after the "
                                          r"other only.*'sequential'"):
        _trainer().predict(module, CombinedLoader([_a(), _b()], "max_size"))


def test_a_stream_without_a_length_validates_at_every_epochs_end() -> None:
    module = Records()
    _trainer(max_epochs=3, num_sanity_val_steps=0).fit(module, DataLoader(Stream(), batch_size=2),
                                                         DataLoader(Indexed(2), batch_size=2))
    assert [s for s in module.seen if s[0] == "val"] == [("val", [0, 1], 0, 0)] * 3


def test_a_function_instead_of_its_loader_and_a_fraction_of_a_stream_are_refused_before_the_run() -> None:
    def make_loader() -> DataLoader[torch.Tensor]:
        return _a()

    with pytest.raises(ConfigError, match=r"train_dataloaders=.*is not a DataLoader.*make_loader\(\) returns one.*"
                                          r"call the function"):
        _trainer(max_epochs=1).fit(Records(), make_loader)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"val_dataloaders=.*is not a DataLoader"):
        _trainer(max_epochs=1).fit(Records(), _a(), make_loader)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"val_check_interval=0\.5: is a fraction of an epoch, but the training "
                                          r"dataloader has no length"):
        _trainer(max_epochs=1, val_check_interval=0.5).fit(Records(), DataLoader(Stream(), batch_size=2), _a())
    with pytest.raises(ConfigError, match=r"limit_train_batches=-1.*limit_train_batches=1\.0 for all batches") as info:
        _trainer(limit_train_batches=-1)
    assert "skip" not in str(info.value)  # 0 would train nothing


def test_teardown_runs_the_data_modules_first_then_the_callbacks_then_the_modules() -> None:
    from xtrain.core import Callback, DataModule

    calls: list[str] = []

    class Data(DataModule):
        def train_dataloader(self) -> DataLoader[torch.Tensor]:
            return _a()

        def teardown(self, stage: str) -> None:
            calls.append("datamodule")

    class Watch(Callback):
        def teardown(self, trainer: Trainer, module: TrainModule, stage: str) -> None:
            calls.append("callback")

    class Module(Records):
        def teardown(self, stage: str) -> None:
            calls.append("module")

    _trainer(max_epochs=1, callbacks=[Watch()]).fit(Module(), datamodule=Data())
    assert calls == ["datamodule", "callback", "module"]  # Lightning's order


def test_loader_methods_set_on_the_instance_are_used() -> None:
    module = Records()
    module.train_dataloader = lambda: DataLoader(Indexed(2), batch_size=2)  # type: ignore[method-assign]
    module.val_dataloader = lambda: {"x": _a(), "y": _b()}  # type: ignore[method-assign]
    _trainer(max_epochs=1, num_sanity_val_steps=0).fit(module)
    assert module.seen == SEQUENTIAL
