"""The xtrain command, run for real in subprocesses."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml

from xtrain.core.testing import run_processes

pytest.importorskip("jsonargparse")

CONFIG = """
seed_everything: 3
trainer:
  accelerator: cpu
  max_epochs: 2
  default_root_dir: {root}
  enable_progress_bar: false
  logger:
    class_path: xtrain.core.CSVLogger
    init_args:
      save_dir: {root}
model:
  class_path: xtrain.core.testing.TinyClassifier
  init_args:
    lr: 0.05
data:
  class_path: xtrain.core.testing.TinyData
  init_args:
    batch_size: 32
"""


def xtrain(*args: str, cwd: Path, timeout: float = 120) -> tuple[int | None, str]:
    exe = shutil.which("xtrain", path=str(Path(sys.executable).parent))
    command = [exe] if exe else [sys.executable, "-c", "from xtrain.core.cli import main; raise SystemExit(main())"]
    result = run_processes([[*command, *args]], timeout=timeout, cwd=cwd)
    return result.returncodes[0], result.output


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG.format(root=tmp_path / "runs"))
    return path


def test_fit_from_a_config_saves_the_resolved_config_beside_the_logs(config: Path, tmp_path: Path) -> None:
    code, output = xtrain("fit", "--config", str(config), cwd=tmp_path)
    assert code == 0, output
    assert "fit finished at epoch 2, step 16" in output
    saved = tmp_path / "runs" / "xtrain_logs" / "version_0" / "config.yaml"
    assert saved.is_file()
    resolved = yaml.safe_load(saved.read_text())
    assert resolved["model"]["init_args"]["lr"] == 0.05 and resolved["seed_everything"] == 3
    assert list((tmp_path / "runs" / "xtrain_logs" / "version_0" / "checkpoints").glob("*.ckpt"))


def test_command_line_overrides_and_optimizer(config: Path, tmp_path: Path) -> None:
    code, output = xtrain("fit", "--config", str(config), "--trainer.max_epochs", "1", "--trainer.limit_train_batches",
                          "3", "--optimizer", "torch.optim.Adam", "--optimizer.lr", "0.01", "--lr_scheduler",
                          "torch.optim.lr_scheduler.StepLR", "--lr_scheduler.step_size", "1", cwd=tmp_path)
    assert code == 0, output
    assert "fit finished at epoch 1, step 3" in output
    saved = yaml.safe_load((tmp_path / "runs" / "xtrain_logs" / "version_0" / "config.yaml").read_text())
    assert saved["optimizer"]["class_path"] == "torch.optim.Adam" and saved["optimizer"]["init_args"]["lr"] == 0.01


def test_print_config_round_trips(config: Path, tmp_path: Path) -> None:
    code, printed = xtrain("fit", "--config", str(config), "--trainer.max_epochs", "5", "--print_config", cwd=tmp_path)
    assert code == 0, printed
    again = tmp_path / "printed.yaml"
    again.write_text(printed)
    code, reprinted = xtrain("fit", "--config", str(again), "--print_config", cwd=tmp_path)
    assert code == 0, reprinted
    assert yaml.safe_load(printed) == yaml.safe_load(reprinted)
    assert yaml.safe_load(printed)["trainer"]["max_epochs"] == 5


def test_a_misspelled_strategy_is_the_config_error_with_valid_names(config: Path, tmp_path: Path) -> None:
    code, output = xtrain("fit", "--config", str(config), "--trainer.strategy", "singel_device", cwd=tmp_path)
    assert code == 2
    assert "strategy='singel_device': is not a registered strategy name" in output
    assert "'single_device'" in output and "did you mean 'single_device'?" in output


def test_validate_and_test_print_metrics(config: Path, tmp_path: Path) -> None:
    code, output = xtrain("test", "--config", str(config), cwd=tmp_path)
    assert code == 0, output
    assert "test results (dataloader 0): test_acc=" in output


def test_help_lists_the_installed_plugins(tmp_path: Path) -> None:
    code, output = xtrain("--help", cwd=tmp_path)
    assert code == 0
    for line in ("accelerators (--trainer.accelerator):", "  cpu ", "strategies (--trainer.strategy):",
                 "  single_device ", "precisions (--trainer.precision):", "  32-true "):
        assert line in output
    assert "[xtrain-core]" in output
