"""``hparams.yaml`` in the run's directory, and ``load_from_checkpoint(hparams_file=...)``, as in Lightning."""

from __future__ import annotations

import json
import sys
from argparse import Namespace
from pathlib import Path
from typing import Any

import pytest
import torch

from xtrain.core import CheckpointError, ConfigError, CSVLogger, Trainer
from xtrain.core._internal.hparams_file import read_hparams_file, write_hparams_yaml
from xtrain.core.testing import TinyClassifier, TinyData

yaml = pytest.importorskip("yaml")


class Configured(TinyClassifier):
    def __init__(self, lr: float = 0.1, dropout: float = 0.0, root: str | Path = "data",
                 sizes: tuple[int, ...] = (1, 2), extra: Namespace | None = None) -> None:
        super().__init__(lr=lr, dropout=dropout)
        self.save_hyperparameters()


def _fit(tmp_path: Path, logger: Any, module: Any, **kwargs: Any) -> Trainer:
    trainer = Trainer(max_steps=2, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=0,
                      enable_progress_bar=False, enable_model_summary=False, logger=logger,
                      default_root_dir=tmp_path, **kwargs)
    trainer.fit(module, datamodule=TinyData(batch_size=8))
    return trainer


def test_csv_logger_writes_hparams_yaml_beside_the_checkpoints_directory(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    module = Configured(lr=0.05, root=tmp_path / "d", sizes=(3, 4), extra=Namespace(depth=2))
    with pytest.warns(UserWarning, match=r"\['extra', 'root'\] are not plain"):  # kept out of checkpoints only
        trainer = _fit(tmp_path, logger, module)
    written = yaml.safe_load((logger.log_dir / "hparams.yaml").read_text())
    assert written["lr"] == 0.05 and written["root"] == str(tmp_path / "d") and written["sizes"] == [3, 4]
    assert written["extra"] == {"depth": 2} and written["batch_size"] == 8  # the datamodule's, as in Lightning
    assert json.loads((logger.log_dir / "hparams.json").read_text())["lr"] == 0.05
    # Lightning's layout, which scripts rely on: version_N/checkpoints/<file>.ckpt and version_N/hparams.yaml
    checkpoint = Path(trainer.checkpoint_callback.best_model_path)  # type: ignore[union-attr]
    assert (checkpoint.parent.parent / "hparams.yaml").is_file()


def test_tensorboard_logger_writes_hparams_yaml(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from xtrain.core.loggers import TensorBoardLogger

    logger = TensorBoardLogger(tmp_path)
    _fit(tmp_path, logger, Configured(lr=0.25))
    assert yaml.safe_load((logger.log_dir / "hparams.yaml").read_text())["lr"] == 0.25


def test_hparams_file_replaces_the_saved_hyperparameters_and_keywords_replace_both(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    trainer = _fit(tmp_path, logger, Configured(lr=0.05, dropout=0.0))
    path = tmp_path / "m.ckpt"
    trainer.save_checkpoint(path)
    hparams = logger.log_dir / "hparams.yaml"
    edited = yaml.safe_load(hparams.read_text())
    edited["dropout"] = 0.5
    hparams.write_text(yaml.safe_dump(edited))
    loaded = Configured.load_from_checkpoint(path, hparams_file=hparams)
    assert loaded.hparams.dropout == 0.5 and loaded.hparams.lr == 0.05
    assert Configured.load_from_checkpoint(path, hparams_file=str(hparams), lr=0.3).hparams.lr == 0.3
    assert Configured.load_from_checkpoint(path).hparams.dropout == 0.0  # without the file: the checkpoint's
    data = TinyData.load_from_checkpoint(path, hparams_file=hparams)  # a datamodule reads it too, never as a kwarg
    assert data.batch_size == 8
    for a, b in zip(trainer.module.state_dict().values(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_without_pyyaml_the_file_is_json_which_yaml_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "hparams.yaml"
    with monkeypatch.context() as patched:
        patched.setitem(sys.modules, "yaml", None)  # import yaml raises ImportError
        write_hparams_yaml(target, {"lr": 0.1, "layers": (2, 3), "name": "x"})
        assert json.loads(target.read_text()) == {"lr": 0.1, "layers": [2, 3], "name": "x"}
        assert read_hparams_file(target) == {"lr": 0.1, "layers": [2, 3], "name": "x"}
    assert yaml.safe_load(target.read_text()) == {"lr": 0.1, "layers": [2, 3], "name": "x"}


def test_a_hostile_hparams_file_cannot_build_objects(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hostile = tmp_path / "hparams.yaml"
    hostile.write_text(f"lr: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(CheckpointError, match=r"hparams\.yaml.*tag that would build a Python object"):
        read_hparams_file(hostile)
    assert not marker.exists()


@pytest.mark.parametrize(("name", "content", "error", "match"), [
    ("hparams.txt", "lr: 1", ConfigError, r"hparams_file='.*hparams\.txt'.*Valid choices: '\.json', '\.yaml', '\.yml'"),
    ("missing.yaml", None, CheckpointError, r"missing\.yaml' cannot be read \(FileNotFoundError"),
    ("list.yaml", "- 1\n- 2\n", CheckpointError, r"list\.yaml' holds a list, not a mapping"),
    ("keys.yaml", "1: a\n", CheckpointError, r"keys\.yaml' holds a dict, not a mapping of names"),
    ("broken.json", "{lr: ", CheckpointError, r"broken\.json' could not be parsed"),
    ("broken.yaml", "a: [1,\n", CheckpointError, r"broken\.yaml' is not valid YAML"),
])
def test_a_bad_hparams_file_names_the_file_and_the_fix(tmp_path: Path, name: str, content: str | None,
                                                       error: type[Exception], match: str) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(error, match=match):
        read_hparams_file(path)


def test_an_oversized_hparams_file_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "hparams.yaml"
    with path.open("wb") as f:
        f.truncate(17 << 20)  # sparse: nothing is written
    with pytest.raises(CheckpointError, match=r"is 17825792 bytes; a hyperparameters file is a few kilobytes"):
        read_hparams_file(path)


def test_a_bad_hparams_file_fails_before_the_checkpoint_is_read(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="hparams_file"):
        Configured.load_from_checkpoint(tmp_path / "absent.ckpt", hparams_file=tmp_path / "h.ini")



def test_checkpoints_keep_only_hyperparameters_a_weights_only_load_reads(tmp_path: Path) -> None:
    """One rule with engine.save (``_internal/loadable.py``): a numpy number or a namedtuple subclasses float or
    tuple, yet ``weights_only`` refuses it, and kept in the checkpoint it made the whole file unloadable."""
    from collections import namedtuple

    import numpy as np

    from xtrain.core._internal.hparams import checkpoint_safe
    from xtrain.core.checkpoint_reader import read_checkpoint
    from xtrain.core.defaults.torch_io import save_file

    pair = namedtuple("pair", "a b")
    given = {"lr": np.float64(0.1), "shape": pair(1, 2), "dtype": torch.bfloat16, "sizes": (3, 4), "n": 3}
    with pytest.warns(UserWarning, match=r"\['lr', 'shape'\] are not plain values"):
        kept = checkpoint_safe(given, "M")
    assert kept == {"dtype": torch.bfloat16, "sizes": (3, 4), "n": 3}
    save_file({"hyper_parameters": kept}, tmp_path / "h.ckpt")
    assert read_checkpoint(tmp_path / "h.ckpt")["hyper_parameters"] == kept


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_an_hparams_file_that_is_no_regular_file_is_refused_without_reading(tmp_path: Path, kind: str) -> None:
    """A FIFO blocked forever and /dev/zero grew without end: both report a size of 0 bytes."""
    import os

    path = tmp_path / "hparams.yaml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()
    with pytest.raises(CheckpointError, match=r"hparams\.yaml' is not a regular file"):
        read_hparams_file(path)
