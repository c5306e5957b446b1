"""``prepare_data_per_node`` (Lightning's attribute of data modules and modules): ``False`` prepares once in all.

An outside trial on two emulated nodes set ``DataModule.prepare_data_per_node = False`` (the migration guide points
there) over a shared folder and saw ``prepare_data`` run on each node: the attribute was not read."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from torch.utils.data import DataLoader

from xtrain.core import DataModule, Trainer, TrainModule
from xtrain.core._internal.trainer_run import _prepares_here
from xtrain.core.testing.models import TinyClassifier, tiny_dataset


@pytest.mark.parametrize(("per_node", "local_rank", "global_rank", "runs"), [
    (True, 0, 0, True), (True, 0, 2, True), (True, 1, 1, False),
    (False, 0, 0, True), (False, 0, 2, False), (False, 1, 3, False),
])
def test_which_process_prepares(per_node: bool, local_rank: int, global_rank: int, runs: bool) -> None:
    owner = SimpleNamespace(prepare_data_per_node=per_node)
    strategy: Any = SimpleNamespace(local_rank=local_rank, global_rank=global_rank)
    assert _prepares_here(owner, strategy) is runs


def test_defaults_are_lightnings() -> None:
    assert DataModule.prepare_data_per_node is True and TrainModule.prepare_data_per_node is True


class _Data(DataModule):
    def __init__(self) -> None:
        super().__init__()
        self.prepare_data_per_node = False  # as Lightning code sets it
        self.prepared = 0

    def prepare_data(self) -> None:
        self.prepared += 1

    def train_dataloader(self) -> Any:
        return DataLoader(tiny_dataset(8), batch_size=4)


def test_global_rank_zero_prepares_in_a_single_process_fit() -> None:
    data = _Data()
    Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False).fit(TinyClassifier(), datamodule=data)
    assert data.prepared == 1
