"""Many runs in one long-lived process, as notebooks and sweeps make them (outside trial MF)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from xtrain.core import Trainer
from xtrain.core._internal.hparams_file import read_hparams_file, write_hparams_yaml
from xtrain.core.testing.models import TinyClassifier, TinyData


def _trainer(tmp_path: Path, **options: Any) -> Trainer:
    settings: dict[str, Any] = {"accelerator": "cpu", "max_epochs": 1, "logger": False, "enable_checkpointing": False,
                                "enable_progress_bar": False, "enable_model_summary": False,
                                "default_root_dir": tmp_path}
    return Trainer(**(settings | options))


def test_a_second_fit_of_a_finished_trainer_says_it_has_nothing_to_train(tmp_path: Path) -> None:
    trainer, model = _trainer(tmp_path), TinyClassifier()
    trainer.fit(model, TinyData(n=32))
    steps = trainer.global_step
    with pytest.warns(UserWarning, match=r"fit has nothing to train: this run already ended \(epoch 1, global_step "
                                         r"2; max_epochs=1.*raise max_epochs or max_steps"):
        trainer.fit(model, TinyData(n=32))
    assert trainer.global_step == steps


def test_runs_in_threads_write_one_hparams_file_without_tripping_over_each_other(tmp_path: Path) -> None:
    """Optuna's n_jobs>1 runs trials in threads of one process: their temporary files were named after the process
    alone, and one trial's rename found the file gone (FileNotFoundError)."""
    path = tmp_path / "hparams.yaml"
    errors: list[BaseException] = []

    def write(value: int) -> None:
        try:
            for _ in range(200):
                write_hparams_yaml(path, {"lr": value})
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert read_hparams_file(path)["lr"] in range(4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hparams.yaml"]  # no temporary left
