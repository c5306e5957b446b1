"""Trial H: the resolved config never replaces the user's own file, and refused values get the fix.

The config-saving cases run the ``xtrain`` command in a subprocess (a real run that trains, or is refused before
training); the refusals are decided while parsing, so they call the command's entry function in this process.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from xtrain.core.testing import run_processes

pytest.importorskip("jsonargparse")

from xtrain.core._internal.cli.main import run

HAND_WRITTEN = """# my hand-written config: keep my comments!
trainer:
  accelerator: cpu
  max_epochs: 1
  logger: false
  enable_checkpointing: false
  enable_progress_bar: false
  enable_model_summary: false
model:
  class_path: xtrain.core.testing.TinyClassifier
data:
  class_path: xtrain.core.testing.TinyData
"""

MODULE = '''
from xtrain.core import TrainModule


class TinyModel(TrainModule):
    def __init__(self, learning_rate: float = 0.1, hidden: int = 8) -> None:
        super().__init__()
        self.learning_rate = learning_rate
'''


def xtrain(*args: str, cwd: Path, timeout: float = 120) -> tuple[int | None, str]:
    exe = shutil.which("xtrain", path=str(Path(sys.executable).parent))
    command = [exe] if exe else [sys.executable, "-c", "from xtrain.core.cli import main; raise SystemExit(main())"]
    result = run_processes([[*command, *args]], timeout=timeout, cwd=cwd)
    return result.returncodes[0], result.output


def test_logger_off_never_replaces_the_config_the_run_was_read_from(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(HAND_WRITTEN)
    code, output = xtrain("fit", "--config", "config.yaml", "--trainer.max_epochs", "2", cwd=tmp_path)
    assert code == 2, output
    assert config.read_text() == HAND_WRITTEN  # comments, max_epochs: 1, no seed added
    assert "fit finished" not in output and "Traceback" not in output
    assert f"trainer.default_root_dir='{tmp_path}'" in output
    assert "is a config file this run was read from" in output
    assert "--trainer.default_root_dir" in output and "--trainer.logger true" in output


def test_a_second_run_with_logger_off_is_refused_before_training(tmp_path: Path) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "run.yaml").write_text(HAND_WRITTEN)
    code, output = xtrain("fit", "--config", "configs/run.yaml", cwd=tmp_path)
    assert code == 0 and "fit finished" in output, output
    saved = tmp_path / "config.yaml"  # without a logger the log dir is the working directory
    first = saved.read_text()
    assert yaml.safe_load(first)["trainer"]["max_epochs"] == 1
    code, output = xtrain("fit", "--config", "configs/run.yaml", "--trainer.max_epochs", "3", cwd=tmp_path)
    assert code == 2, output
    assert saved.read_text() == first and "fit finished" not in output and "Traceback" not in output
    assert f"{saved} already exists" in output and "delete or move config.yaml" in output


def test_with_a_logger_the_config_goes_to_the_version_dir_as_before(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(HAND_WRITTEN)
    for version in (0, 1):
        code, output = xtrain("fit", "--config", "config.yaml", "--trainer.logger", "true", cwd=tmp_path)
        assert code == 0 and "fit finished" in output, output
        assert (tmp_path / "xtrain_logs" / f"version_{version}" / "config.yaml").is_file()
    assert config.read_text() == HAND_WRITTEN


@pytest.fixture
def tinymod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A model with ``learning_rate`` in a module next to the configs (the command puts their folder on sys.path)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "trialh_tinymod", raising=False)
    (tmp_path / "trialh_tinymod.py").write_text(MODULE)
    (tmp_path / "base.yaml").write_text("trainer: {accelerator: cpu, logger: false}\nmodel:\n"
                                        "  class_path: trialh_tinymod.TinyModel\n")
    yield tmp_path
    sys.modules.pop("trialh_tinymod", None)


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert run(argv) == 2
    captured = capsys.readouterr()
    assert "fit finished" not in captured.out
    assert "Run `xtrain fit --help` for the options." in captured.err
    return captured.err


def _yaml(directory: Path, text: str) -> str:
    path = directory / "extra.yaml"
    path.write_text(text)
    return str(path)


def test_an_abbreviated_init_arg_names_the_full_name(tinymod: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = str(tinymod / "base.yaml")
    expected = "trialh_tinymod.TinyModel takes no argument 'learn'; did you mean 'learning_rate'?"
    assert expected in _refused(["fit", "--config", base, "--model.learn", "0.5"], capsys)
    extra = _yaml(tinymod, "model:\n  init_args:\n    learn: 0.5\n")
    assert expected in _refused(["fit", "--config", base, "--config", extra], capsys)


def test_an_init_arg_beside_class_path_is_told_to_go_under_init_args(tinymod: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    extra = _yaml(tinymod, "model:\n  class_path: trialh_tinymod.TinyModel\n  learning_rate: 0.5\n")
    err = _refused(["fit", "--config", str(tinymod / "base.yaml"), "--config", extra], capsys)
    assert "model.learning_rate is an argument of trialh_tinymod.TinyModel; init args go under init_args" in err
    assert "Fix: model: {class_path: trialh_tinymod.TinyModel, init_args: {learning_rate: 0.5}}" in err
    assert "--model.learning_rate 0.5" in err


def test_a_value_of_the_wrong_type_names_the_type_and_the_fix(tinymod: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    extra = _yaml(tinymod, 'trainer:\n  max_epochs: "three"\n')
    err = _refused(["fit", "--config", str(tinymod / "base.yaml"), "--config", extra], capsys)
    assert "trainer.max_epochs='three' is not an int or null. Fix: write an int without quotes" in err
    assert "--trainer.max_epochs 3 (in YAML: max_epochs: 3)" in err


def test_a_misspelt_choice_names_the_closest_choice(tinymod: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(["fit", "--config", str(tinymod / "base.yaml"), "--trainer.on_nonfinite_loss", "rase"], capsys)
    assert "trainer.on_nonfinite_loss='rase' is not a valid choice; did you mean 'raise'?" in err
    assert "Valid choices: 'raise', 'skip', 'warn'. Fix: --trainer.on_nonfinite_loss raise" in err


def test_a_misspelt_class_names_the_closest_class(tinymod: Path, capsys: pytest.CaptureFixture[str]) -> None:
    extra = _yaml(tinymod, "model:\n  class_path: trialh_tinymod.TinyModle\n")
    err = _refused(["fit", "--config", str(tinymod / "base.yaml"), "--config", extra], capsys)
    assert "trialh_tinymod has no 'TinyModle'; did you mean trialh_tinymod.TinyModel" in err
    assert "Fix: class_path: trialh_tinymod.TinyModel." in err
    err = _refused(["fit", "--config", str(tinymod / "base.yaml"), "--optimizer", "torch.optim.Adamw"], capsys)
    assert "did you mean torch.optim.AdamW" in err


@pytest.mark.parametrize(("given", "expected"), [("--conf", "--config"), ("--print_conf", "--print_config")])
def test_an_abbreviated_command_option_names_the_full_option(tinymod: Path, given: str, expected: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["fit", given, str(tinymod / "base.yaml")] if given == "--conf" else [
        "fit", "--config", str(tinymod / "base.yaml"), given]
    err = _refused(argv, capsys)
    assert f"{given} is not an option (options are never abbreviated); did you mean {expected}?" in err


def test_xtrain_cli_overwrite_still_never_replaces_the_config_it_read(tmp_path: Path) -> None:
    from xtrain.core.cli import XtrainCLI
    from xtrain.core.errors import ConfigError
    from xtrain.core.testing import TinyClassifier, TinyData

    config = tmp_path / "config.yaml"
    config.write_text("trainer:\n  logger: false\n  max_steps: 2\n  enable_progress_bar: false\n"
                      f"  default_root_dir: {tmp_path}\n")
    before = config.read_text()
    cli = XtrainCLI(TinyClassifier, TinyData, run=False, args=["--config", str(config)],
                    save_config_kwargs={"overwrite": True})
    with pytest.raises(ConfigError, match="is a config file this run was read from") as refused:
        cli.trainer.fit(cli.model, cli.datamodule)
    assert "save_config_kwargs={'config_filename': 'resolved.yaml'}" in str(refused.value)
    assert config.read_text() == before and cli.trainer.global_step == 0
