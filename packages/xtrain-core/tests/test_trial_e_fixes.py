"""Defects an outside trial of real-project-style Lightning scripts found (trial E); each test fails without its fix.

Expected values were measured with Lightning 2.6.6 on the same code where a number is compared.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core import DataModule, Trainer
from xtrain.core.migrate import migrate_source
from xtrain.core.testing import TinyClassifier, tiny_loaders


def test_migrate_never_imports_a_lightning_modules_dunders() -> None:
    """``pl.__name__`` became ``from xtrain.core import __name__``, which shadowed the script's own ``__name__``: the
    ``if __name__ == "__main__":`` block never ran and the script exited 0 having done nothing."""
    code = ('import lightning.pytorch as pl\nfrom lightning.pytorch import __version__ as plv\n'
            'print("using", pl.__name__, pl.__version__, plv)\nif __name__ == "__main__":\n    print("main ran")\n')
    migrated = migrate_source(code)
    assert "from xtrain.core import __" not in migrated and "xtrain.core import (" not in migrated
    assert "xtrain migrate: Lightning's version" in migrated
    bound = [alias.asname or alias.name for node in ast.walk(ast.parse(migrated)) if isinstance(node, ast.ImportFrom)
             and (node.module or "").startswith("xtrain") for alias in node.names]
    assert not [name for name in bound if name.startswith("__")], bound


@dataclasses.dataclass
class Batch:
    ids: list[str]
    x: torch.Tensor


def test_epoch_means_weight_batches_found_in_dataclasses_and_past_strings() -> None:
    """Case 33: a dataclass batch weighed 1 per batch, so an uneven last batch skewed the epoch mean (val_loss
    0.2959 vs Lightning's 0.2483); a dict whose first entry is a list of strings weighed 1 too."""
    from xtrain.core._internal.metrics import _batch_size

    assert _batch_size(Batch(["a", "b", "c"], torch.zeros(3, 2))) == 3
    assert _batch_size({"text": ["a", "b"], "label": torch.zeros(2)}) == 2
    assert _batch_size((["x"], {"y": torch.zeros(5, 1)})) == 5
    assert _batch_size({"text": ["a"]}) == 1  # no tensor: 1, as before

    class Mean(TinyClassifier):
        def validation_step(self, batch: Batch, batch_idx: int) -> None:
            self.log("v", batch.x.sum() / len(batch.x))  # the batch's own mean

    def collate(items: list[tuple[torch.Tensor, torch.Tensor]]) -> Batch:
        return Batch([str(i) for i in range(len(items))], torch.stack([y.float() for _, y in items]))

    data = torch.utils.data.TensorDataset(torch.zeros(5, 16), torch.tensor([0, 0, 0, 0, 3]))
    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    result = trainer.validate(Mean(), torch.utils.data.DataLoader(data, batch_size=4, collate_fn=collate))
    assert result[0]["v"] == pytest.approx(3 / 5)  # weighted by 4 and 1 (unweighted: (0 + 3) / 2)


def test_datamodule_from_datasets_builds_lightnings_loaders() -> None:
    """Case 13: migrate rewrote LightningDataModule.from_datasets to DataModule.from_datasets, which did not exist."""
    from xtrain.core import DataModule
    from xtrain.core.testing import tiny_dataset

    class Named(DataModule):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

    train, val = tiny_dataset(40), tiny_dataset(24, seed=1)
    data = Named.from_datasets(train, {"a": val, "b": val}, batch_size=8, name="x")
    assert isinstance(data, Named) and data.name == "x"
    loader = data.train_dataloader()
    assert loader.batch_size == 8 and isinstance(loader.sampler, torch.utils.data.RandomSampler)
    assert sorted(data.val_dataloader()) == ["a", "b"]
    with pytest.raises(NotImplementedError):
        data.test_dataloader()  # no test dataset: the class's own hook
    trainer = Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(TinyClassifier(), datamodule=DataModule.from_datasets(train, val, batch_size=8))
    assert trainer.global_step == 5 and trainer.num_val_batches == [3]


def test_log_takes_rank_zero_only_and_refuses_it_with_sync_dist() -> None:
    """Case 5: self.log(..., rank_zero_only=True) was a TypeError, and migrate's flag said 'or upgrade xtrain-core'
    as if a version had it."""
    from xtrain.core import ConfigError

    class Logs(TinyClassifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.log("on_zero", loss, rank_zero_only=True)
            self.log_dict({"also": loss}, rank_zero_only=True)
            return loss

    trainer = Trainer(accelerator="cpu", max_steps=2, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Logs(), tiny_loaders()[0])
    assert {"on_zero", "also"} <= set(trainer.callback_metrics)
    module = Logs()
    module._trainer = trainer
    with pytest.raises(ConfigError, match=r"rank_zero_only=True.*sync_dist"):
        module.log("x", torch.tensor(1.0), rank_zero_only=True, sync_dist=True)
    note = migrate_source("import lightning.pytorch as pl\n\nclass M(pl.LightningModule):\n"
                          "    def training_step(self, b, i):\n        self.log('x', 1.0, enable_graph=True)\n")
    assert "is not accepted by xtrain (the installed xtrain-core" in note and "upgrade" not in note


class LinkedData(DataModule):
    def __init__(self, n_classes: int = 3, batch_size: int = 8) -> None:
        super().__init__()
        self.n_classes, self.batch_size = n_classes, batch_size

    @property
    def num_classes(self) -> int:
        return self.n_classes

    def train_dataloader(self) -> Any:
        x = torch.randn(32, 16, generator=torch.Generator().manual_seed(0))
        data = torch.utils.data.TensorDataset(x, x[:, :self.n_classes].argmax(1))
        return torch.utils.data.DataLoader(data, batch_size=self.batch_size)


class LinkedModel(TinyClassifier):
    def __init__(self, num_classes: int = 2, lr: float = 0.1) -> None:
        super().__init__(lr=lr, classes=num_classes)
        self.num_classes = num_classes


def test_cli_links_applied_on_instantiation(tmp_path: Path) -> None:
    """Case 31: link_arguments('data.num_classes', 'model.num_classes', apply_on='instantiate') raised jsonargparse's
    'Links applied on instantiation require source to be a subclass action or a class group'."""
    from xtrain.core.cli import XtrainCLI

    class CLI(XtrainCLI):
        def add_arguments_to_parser(self, parser: Any) -> None:
            parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")
            parser.link_arguments("data.batch_size", "model.lr", compute_fn=lambda size: size / 80,
                                  apply_on="instantiate")

    cli = CLI(LinkedModel, LinkedData, args=["fit", "--data.n_classes", "4", "--trainer.max_steps", "2",
                                             "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
                                             "--trainer.default_root_dir", str(tmp_path)])
    assert cli.model.num_classes == 4 and cli.model.hparams["lr"] == pytest.approx(0.1)
    assert cli.trainer.global_step == 2


def test_a_key_logged_without_dataloader_idx_is_in_its_own_dataloaders_results_only() -> None:
    """Case 7b: val_acc logged with add_dataloader_idx=False from dataloader 0 appeared in dataloader 1's dict too
    (Lightning 2.6.6: [{'val_loss/dataloader_idx_0', 'val_acc', 'epoch_marker'}, {'val_loss/dataloader_idx_1',
    'epoch_marker'}])."""

    class Two(TinyClassifier):
        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            x, y = batch
            self.log("val_loss", torch.nn.functional.cross_entropy(self(x), y))
            if dataloader_idx == 0:
                self.log("val_acc", (self(x).argmax(1) == y).float().mean(), add_dataloader_idx=False)
            self.log("both", 1.0, add_dataloader_idx=False, on_step=True, on_epoch=True)

        def on_validation_epoch_end(self) -> None:
            self.log("epoch_marker", 3.0)

    trainer = Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    val = tiny_loaders()[1]
    results = trainer.validate(Two(), [val, val])
    assert [sorted(r) for r in results] == [["both_epoch", "epoch_marker", "val_acc", "val_loss/dataloader_idx_0"],
                                            ["both_epoch", "epoch_marker", "val_loss/dataloader_idx_1"]]


def test_migrate_flags_module_hooks_xtrain_never_calls() -> None:
    """Trial E D4/D5: overrides of backward and on_validation_model_zero_grad were ported silently and never ran."""
    migrated = migrate_source("import lightning.pytorch as pl\n\nclass M(pl.LightningModule):\n"
                              "    def backward(self, loss, *args, **kwargs):\n        loss.backward(retain_graph=True)\n"
                              "\n    def on_validation_model_zero_grad(self):\n        pass\n")
    assert "# xtrain migrate: backward: xtrain never calls an override of backward" in migrated
    assert "# xtrain migrate: on_validation_model_zero_grad: xtrain never calls an override" in migrated
