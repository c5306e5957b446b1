"""A YAML key written twice in one mapping: YAML keeps the second silently, the xtrain command and XtrainCLI refuse
it naming both lines (found by a hostile-file trial: a duplicated key in a file read as a mapping went through)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("jsonargparse")

from xtrain.core._internal.cli.main import run
from xtrain.core.testing import TinyClassifier, TinyData

MODEL = "model:\n  class_path: xtrain.core.testing.TinyClassifier\n  init_args:\n"


@pytest.mark.parametrize(("text", "expected"), [
    ("trainer:\n  max_epochs: 1\n  accelerator: cpu\n  max_epochs: 3\n", "'max_epochs' is written twice in one "
                                                                          "mapping (lines 2 and 4)"),
    (MODEL + "    lr: 1e-3\n    features: 16\n    lr: 0.5\n", "'lr' is written twice in one mapping (lines 4 and 6)"),
    ("trainer:\n  max_epochs: 1\ntrainer:\n  max_epochs: 2\n", "'trainer' is written twice in one mapping (lines 1 "
                                                               "and 3)"),
])
def test_a_key_written_twice_is_refused_naming_both_lines(text: str, expected: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(text)
    assert run(["fit", "--config", str(config), "--print_config"]) == 2
    err = capsys.readouterr().err
    assert expected in err and "YAML would silently keep only the second. Fix: delete the one" in err, err


def test_values_read_as_before(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same key in two mappings is not a duplicate, and values keep jsonargparse's reading (1e-3 a float)."""
    config = tmp_path / "config.yaml"
    config.write_text(MODEL + "    lr: 1e-3\n" + "trainer:\n  max_epochs: 2\n  accelerator: cpu\n")
    with pytest.raises(SystemExit) as printed:  # --print_config exits once it has printed
        run(["fit", "--config", str(config), "--trainer.max_epochs", "3", "--print_config"])
    assert printed.value.code == 0
    out = capsys.readouterr().out
    assert "    lr: 0.001\n" in out and "  max_epochs: 3\n" in out, out


def test_xtrain_cli_refuses_it_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from xtrain.core.cli import XtrainCLI

    config = tmp_path / "config.yaml"
    config.write_text("trainer:\n  max_steps: 1\n  max_steps: 5\n")
    with pytest.raises(SystemExit) as exited:
        XtrainCLI(TinyClassifier, TinyData, run=False, args=["--config", str(config)])
    assert exited.value.code == 2
    assert "'max_steps' is written twice in one mapping (lines 2 and 3)" in capsys.readouterr().err
