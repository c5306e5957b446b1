"""A ``config.yaml`` that LightningCLI saved runs after ``xtrain migrate`` as it is (outside trial Y needed four rounds
of deleting keys by hand): Lightning writes every default, ``None`` for its optional Trainer arguments, the
``SummaryWriter`` keywords of its TensorBoardLogger, ``save_on_exception``, ``model_registry`` and ``weights_only``."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("jsonargparse")

from xtrain.core._internal.cli.main import run
from xtrain.core._internal.migrate.config import migrate_yaml

# The parts of a Lightning 2.6 config.yaml that xtrain read differently (written with Lightning's defaults).
SAVED = """\
seed_everything: 7
trainer:
  accelerator: cpu
  logger:
  - class_path: lightning.pytorch.loggers.TensorBoardLogger
    init_args:
      save_dir: {root}
      name: tb
      version: null
      log_graph: false
      default_hp_metric: true
      prefix: ''
      sub_dir: null
      comment: ''
      purge_step: null
      max_queue: 10
      flush_secs: 120
      filename_suffix: ''
  callbacks:
  - class_path: lightning.pytorch.callbacks.ModelCheckpoint
    init_args:
      dirpath: {root}/ck
      monitor: val_loss
      save_on_exception: false
  - {{class_path: lightning.pytorch.callbacks.LearningRateMonitor, init_args: {{logging_interval: step}}}}
  max_epochs: 1
  limit_train_batches: null
  limit_val_batches: null
  limit_test_batches: null
  limit_predict_batches: null
  val_check_interval: null
  num_sanity_val_steps: null
  log_every_n_steps: null
  enable_checkpointing: null
  enable_progress_bar: false
  enable_model_summary: false
  gradient_clip_algorithm: null
  default_root_dir: {root}
  model_registry: null
model:
  class_path: xtrain.core.testing.models.TinyClassifier
data:
  class_path: xtrain.core.testing.models.TinyData
  init_args:
    n: 64
ckpt_path: null
weights_only: null
"""


def test_a_migrated_lightning_config_runs_unchanged(tmp_path: Path) -> None:
    migrated = migrate_yaml(SAVED.format(root=tmp_path))
    assert migrated.attention == [], migrated.attention
    assert "lightning.pytorch" not in migrated.new and "model_registry" not in migrated.new
    config = tmp_path / "config.yaml"
    config.write_text(migrated.new)
    assert run(["fit", "--config", str(config)]) == 0
    assert (tmp_path / "ck").is_dir() and list((tmp_path / "tb").rglob("events.out.tfevents.*"))


def test_weights_only_false_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(migrate_yaml(SAVED.format(root=tmp_path)).new.replace("weights_only: null",
                                                                           "weights_only: false"))
    assert run(["fit", "--config", str(config)]) == 2
    assert "weights_only=False" in capsys.readouterr().err


def test_a_flow_mapping_nested_past_the_stack_is_renamed_without_its_arguments_checked() -> None:
    """Reading a flow mapping's ``init_args`` must not crash migrate on a line nested past the interpreter's stack."""
    deep = "[" * 5000 + "]" * 5000
    migrated = migrate_yaml(f"trainer:\n  logger: {{class_path: lightning.pytorch.loggers.CSVLogger, init_args: "
                            f"{{x: {deep}}}}}\n")
    assert "class_path: xtrain.core.loggers.CSVLogger" in migrated.new and migrated.attention == []
