"""The CLI refuses abbreviated and unknown options and config keys, naming the closest valid one.

These never get as far as training, so they call the command's entry function in this process.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("jsonargparse")

from xtrain.core._internal.cli.main import run

MODEL = ["--model", "xtrain.core.testing.TinyClassifier", "--data", "xtrain.core.testing.TinyData"]


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert run(argv) == 2
    return capsys.readouterr().err


def test_an_abbreviated_option_is_refused_with_the_full_name(capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(["fit", *MODEL, "--trainer.max_epoch", "3"], capsys)
    assert "unrecognized arguments: --trainer.max_epoch 3" in err
    assert "did you mean --trainer.max_epochs" in err and "never abbreviated" in err
    err = _refused(["fit", *MODEL, "--trainer.max_epochz=3"], capsys)
    assert "did you mean --trainer.max_epochs" in err


@pytest.mark.parametrize(("yaml_text", "expected"), [
    ("trainer:\n  max_epoch: 3\n", "'trainer.max_epoch' is not a valid key; did you mean 'trainer.max_epochs'"),
    ("trainr:\n  max_epochs: 3\n", "'trainr.max_epochs' is not a valid key; did you mean 'trainer.max_epochs'"),
    ("model:\n  class_path: xtrain.core.testing.TinyClassifier\n  init_args:\n    lr_: 0.1\n",
     "xtrain.core.testing.TinyClassifier takes no argument 'lr_'; did you mean 'lr'"),
    # nothing close: the valid names instead (and never the group itself as the "closest key")
    ("trainer:\n  zzzqqq: 3\n", "'trainer.zzzqqq' is not a valid key; the keys of trainer are 'accelerator', "),
    ("model:\n  class_path: xtrain.core.testing.TinyClassifier\n  init_args:\n    learn: 0.1\n",
     "TinyClassifier takes no argument 'learn'; its arguments are 'lr', 'dropout', 'features', 'classes'."),
])
def test_a_config_key_with_a_typo_is_refused_with_the_closest_key(tmp_path: Path, yaml_text: str, expected: str,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml_text)
    argv = ["fit", "--config", str(config)]
    if not yaml_text.startswith("model"):
        argv += MODEL
    err = _refused(argv, capsys)
    assert expected in err, err
    assert "Run `xtrain fit --help`" in err


def test_an_unknown_init_arg_flag_names_the_class_parameter(capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(["fit", *MODEL, "--model.dropot", "0.1"], capsys)
    assert "takes no argument 'dropot'; did you mean 'dropout'" in err
