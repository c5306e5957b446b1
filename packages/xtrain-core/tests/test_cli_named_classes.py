"""The xtrain command takes loggers, profilers and callbacks by bare class name in YAML (a real run)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from xtrain.core.testing import run_processes

pytest.importorskip("jsonargparse")
pytest.importorskip("wandb")
pytest.importorskip("mlflow")

CONFIG = """
trainer:
  accelerator: cpu
  max_epochs: 1
  enable_progress_bar: false
  log_every_n_steps: 1
  default_root_dir: {root}
  profiler:
    class_path: SimpleProfiler
    init_args:
      dirpath: {root}/perf
      filename: report
  callbacks:
    - class_path: EarlyStopping
      init_args:
        monitor: val_loss
  logger:
    - class_path: WandbLogger
      init_args:
        save_dir: {root}
        project: cli
        version: clirun1
        offline: true
model:
  class_path: xtrain.core.testing.TinyClassifier
data:
  class_path: xtrain.core.testing.TinyData
  init_args:
    n: 64
"""


def test_fit_with_trackers_and_a_profiler_named_by_class(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG.format(root=root))
    exe = shutil.which("xtrain", path=str(Path(sys.executable).parent))
    command = [exe] if exe else [sys.executable, "-c", "from xtrain.core.cli import main; raise SystemExit(main())"]
    env = {"WANDB_SILENT": "true", "WANDB_DATA_DIR": str(tmp_path / "wd"), "WANDB_CACHE_DIR": str(tmp_path / "wc"),
           "WANDB_CONFIG_DIR": str(tmp_path / "wcfg")}
    result = run_processes([[*command, "fit", "--config", str(config)]], timeout=240, envs=[env], cwd=tmp_path)
    assert result.returncodes == [0], result.output
    assert "fit finished at epoch 1, step 4" in result.output
    assert list((root / "wandb").glob("offline-run-*-clirun1/run-clirun1.wandb"))
    assert "training_step" in (root / "perf" / "report-fit-rank0.txt").read_text()


def test_every_new_class_parses_and_builds_by_bare_name(tmp_path: Path) -> None:
    import yaml

    from xtrain.core import Trainer
    from xtrain.core._internal.cli.instantiate import arguments_of, class_from_path
    from xtrain.core._internal.cli.main import _stage_parser
    from xtrain.core.errors import ConfigError
    from xtrain.core.loggers import MLFlowLogger, WandbLogger
    from xtrain.core.profilers import AdvancedProfiler, PyTorchProfiler

    trainer = {"logger": [{"class_path": "MLFlowLogger", "init_args": {"save_dir": str(tmp_path)}},
                          {"class_path": "WandbLogger", "init_args": {"offline": True, "log_model": "all"}}],
               "profiler": {"class_path": "PyTorchProfiler", "init_args": {"active": 2}}}
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"trainer": trainer, "model": {"class_path": "xtrain.core.testing.TinyClassifier"}}))
    cfg = _stage_parser("fit").parse_args(["--config", str(config)])
    kwargs = arguments_of(Trainer, cfg.trainer, where="trainer")
    assert [type(x) for x in kwargs["logger"]] == [MLFlowLogger, WandbLogger]
    assert isinstance(kwargs["profiler"], PyTorchProfiler) and kwargs["profiler"].schedule["active"] == 2
    assert class_from_path("AdvancedProfiler") is AdvancedProfiler
    with pytest.raises(ConfigError, match="NoSuchLogger"):
        class_from_path("NoSuchLogger")
